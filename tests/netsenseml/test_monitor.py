"""The network monitor on synthetic sample streams, and the kernel's TCP_INFO on a real socket.

Streams mimic what the hooks feed it: a 4-byte collective every few steps (its time is the
path's round trip plus the waiting for the last rank) and payload collectives whose service
time is ``rtt + bytes / rate``, with a shaper's burst letting the first bytes out at line
speed.
"""

import random
import socket
import threading

import pytest

from netsenseml.monitor import (
    CountedExtreme,
    NetworkMonitor,
    TcpInfoSensor,
    WindowedExtreme,
    parse_tcp_info,
    parse_total_retrans,
    rtt_probe_due,
)

RTT = 3e-4


def payload(b, rate, burst=0.0, line=1.25e9, rtt=RTT):
    fast = min(b, burst)
    return rtt + fast / line + (b - fast) / rate


def feed(mon, steps, b, rate, rng, burst=0.0, skew=2e-3, every=4):
    for i in range(steps):
        if i % every == 0:
            mon.add(4, RTT + skew * rng.random())
        mon.add(b, payload(b, rate, burst) * (1 + 0.05 * rng.random()))


def test_counted_extreme_is_a_window_of_samples():
    w = CountedExtreme(3, "max")
    for v in (5, 1, 2, 3):
        w.add(v)
    assert w.value() == 3  # 5 left with the 4th sample
    m = CountedExtreme(2, "min")
    for v in (1, 4, 2):
        m.add(v)
    assert m.value() == 2 and m.count == 3
    m.clear()
    assert m.value() is None


def test_time_window_of_the_prototype_rule_expires_old_samples():
    w = WindowedExtreme(1.0, "max")
    w.add(5.0, 0.0)
    w.add(3.0, 0.5)
    assert w.value(0.9) == 5.0 and w.value(1.2) == 3.0


def test_min_rtt_comes_from_tiny_collectives_and_rate_from_long_ones():
    rng = random.Random(0)
    mon = NetworkMonitor()
    feed(mon, 40, 1.1e6, 62.5e6, rng, burst=125e3)
    est = mon.estimate()
    assert est.min_rtt == pytest.approx(RTT, rel=0.01)
    # within the burst's bias (125 kB of 1.1 MB left at line speed) and the 5 % noise
    assert 62.5e6 * 0.95 <= est.max_rate <= 62.5e6 * 1.15
    assert est.bdp == pytest.approx(est.max_rate * est.min_rtt)


def test_short_transfers_are_no_rate_samples_and_do_not_inflate_the_rate():
    rng = random.Random(1)
    mon = NetworkMonitor(rate_filter="max")
    feed(mon, 20, 1.1e6, 62.5e6, rng, burst=125e3)
    before = mon.estimate().max_rate
    # top-k sized payloads within the burst would read as ~20x the rate
    for _ in range(20):
        assert not mon.add(60e3, payload(60e3, 62.5e6, burst=125e3))
    assert mon.estimate().max_rate == before
    assert mon.estimate().rate_age == 20


def test_a_rate_with_no_sample_for_rate_max_age_samples_is_no_estimate():
    """A job that sends only short transfers for a while (top-k on a fast path) must not
    keep a rate sensed before the path changed; the next rate sample starts afresh."""
    rng = random.Random(3)
    mon = NetworkMonitor(rate_max_age=32, rate_filter="max")
    feed(mon, 20, 1.1e6, 62.5e6, rng)
    for _ in range(32):
        mon.add(60e3, payload(60e3, 62.5e6))
    assert mon.estimate().max_rate is not None
    mon.add(60e3, payload(60e3, 62.5e6))
    assert mon.estimate().max_rate is None and mon.estimate().rate_age == 33
    assert mon.rate_threshold() == mon.min_rate_bytes  # no BDP from an expired rate
    # the path is now 10x slower: the first sample is the estimate, not the old max
    assert mon.add(1.1e6, payload(1.1e6, 6.25e6))
    assert mon.estimate().max_rate == pytest.approx(6.25e6, rel=0.01)
    assert mon.last_rate_sample[0] == 1.1e6 and mon.last_rate_sample[2] == mon.min_rtt


def test_a_sample_below_one_min_rtt_of_transfer_is_discarded_not_floored():
    mon = NetworkMonitor(min_rate_bytes=0, rate_filter="max")
    mon.add(4, 1e-3)
    assert not mon.add(1e6, 1.5e-3)  # 0.5 ms of transfer < one min RTT: no sample
    assert mon.discarded == 1 and mon.estimate().max_rate is None
    # the old monitor's floor would have claimed 1e6 / (0.25 x 1.5 ms) = 2.7 GB/s
    assert mon.add(1e6, 1e-3 + 1e6 / 50e6)
    assert mon.estimate().max_rate == pytest.approx(50e6)


def test_a_new_min_rtt_does_not_shorten_its_own_transfer():
    mon = NetworkMonitor(min_rate_bytes=0, rate_filter="max")
    mon.add(4, 5e-3)  # a skewed first probe
    assert mon.add(1e6, 5e-3 + 1e6 / 50e6)
    assert mon.estimate().max_rate == pytest.approx(50e6)
    # a payload faster than the old min RTT is itself the new min RTT: no rate from it
    assert not mon.add(1e6, 4e-3)
    assert mon.min_rtt == 4e-3


def test_rate_follows_a_drop_within_the_window_and_a_restart_forgets_at_once():
    rng = random.Random(2)
    mon = NetworkMonitor(rate_window=8, rate_filter="max")
    feed(mon, 20, 1.1e6, 62.5e6, rng)
    feed(mon, 8, 1.1e6, 6e6, rng)
    assert mon.estimate().max_rate == pytest.approx(6e6, rel=0.1)
    feed(mon, 10, 1.1e6, 62.5e6, rng)
    mon.restart_rate()
    assert mon.estimate().max_rate is None and RTT <= mon.estimate().min_rtt < 2 * RTT


def test_the_median_filter_ignores_a_lucky_burst_that_the_max_filter_keeps():
    """Under congestion a payload period errs both ways (eval-onoff: 40-500 Mbit/s samples
    on a 56 Mbit/s share); the window's maximum is its luckiest burst."""
    med, mx = (NetworkMonitor(rate_window=4, rate_filter="median"),
               NetworkMonitor(rate_window=4, rate_filter="max"))
    for mon in (med, mx):
        mon.add(4, RTT)
        for rate in (7e6, 6e6, 60e6, 8e6):  # one burst into a just-drained queue
            assert mon.add(1.1e6, RTT + 1.1e6 / rate)
    assert med.estimate().max_rate == pytest.approx(7.5e6)
    assert mx.estimate().max_rate == pytest.approx(60e6)
    with pytest.raises(ValueError, match="rate_filter must be one of sustained, max, median"):
        NetworkMonitor(rate_filter="mean")


def test_rate_threshold_grows_with_the_bdp():
    mon = NetworkMonitor(min_rate_bytes=0, bdp_multiple=4, rate_filter="max")
    mon.add(4, 0.01)  # 10 ms path
    mon.add(1e7, 0.01 + 1e7 / 1e8)  # 100 MB/s: BDP 1 MB
    assert mon.rate_threshold() == pytest.approx(4e6)


def test_empty_samples_are_ignored():
    mon = NetworkMonitor()
    mon.add(0, 1.0)
    mon.add(10, 0.0)
    assert mon.estimate() is None


def test_rtt_probe_schedule_is_every_dense_step_and_every_nth_otherwise():
    assert all(rtt_probe_due(s, "fp16", 4) for s in range(1, 9))
    assert [s for s in range(1, 9) if rtt_probe_due(s, "topk", 4)] == [4, 8]
    # by default a gathered level probes every 16th step: each probe waits behind the full
    # queue of a congested phase and its step waits for it (results/README.md, A/B of the
    # cadence 4 -> 16)
    assert [s for s in range(1, 33) if rtt_probe_due(s, "int8")] == [16, 32]


def test_tcp_info_of_a_real_loopback_connection():
    """TCP_INFO as the hooks read it: this process's own connected sockets."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = []

    def sink():
        conn, _ = srv.accept()
        while chunk := conn.recv(1 << 16):
            got.append(len(chunk))
        conn.close()

    th = threading.Thread(target=sink)
    th.start()
    cli = socket.create_connection(srv.getsockname())
    try:
        cli.sendall(b"x" * (4 << 20))
        raw = cli.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        rate, _app_limited, min_rtt, acked = parse_tcp_info(raw)
        assert acked > 0 and rate > 0 and 0 < min_rtt < 0.01
        view = TcpInfoSensor(exclude_port=None).read()
        assert view is not None and view.sockets >= 1
        assert view.delivery_rate_Bps > 0 and 0 < view.min_rtt_s < 0.01
        # the rendezvous store's port is left out
        excluded = TcpInfoSensor(exclude_port=srv.getsockname()[1]).read()
        assert excluded is None or excluded.sockets < view.sockets
    finally:
        cli.close()
        th.join(timeout=10)
        srv.close()
    assert sum(got) == 4 << 20
    with pytest.raises(ValueError, match="too short"):
        parse_tcp_info(b"\0" * 100)


def test_retransmitted_segments_are_read_from_their_offset() -> None:
    raw = bytearray(232)
    raw[100:104] = (7).to_bytes(4, "little")  # tcpi_total_retrans
    raw[96:100] = (99).to_bytes(4, "little")  # tcpi_rcv_space, beside it
    assert parse_total_retrans(bytes(raw)) == 7
    with pytest.raises(ValueError, match="too short"):
        parse_total_retrans(b"\0" * 100)
