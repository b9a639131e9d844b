"""The monitor's ``"sustained"`` rate filter (the default) on constructed service-time series:
large and small messages, competing flows, a probe's debt paid by the next step.

The numbers are those of the accel-d70 runs (issue 49): a 548 kB int8 all-gather and a
1.1 MB fp16 allreduce are rate-sized, a 60 kB top-k all-gather is not; beside 8 TCP streams
on 8 Gbit/s the job's share is 1/9 of the link. A collective completes on a rank once it has
*received* what it needs; what it sent may still be queued, and the next collective pays
for it (``debt``); ``pair_next`` takes each rate sample with the period after it for that.
"""

import pytest

from netsenseml.monitor import NetworkMonitor, SustainedWindow

RTT = 3e-5  # the 4 BDP threshold stays below the 548 kB int8 period at 8 Gbit/s
LINK = 1e9  # bytes/s: 8 Gbit/s
SHARE = LINK / 9  # one more flow beside 8 streams
INT8, FP16, TOPK = 548e3, 1.1e6, 60e3


def period(b: float, rate: float, debt: float = 0.0) -> float:
    """Service time of ``b`` bytes at ``rate`` plus ``debt`` seconds a previous period left."""
    return RTT + b / rate + debt


#: congested int8 periods: the share, each within +-18 % (the committed runs' sustained
#: samples after the onset: 0.7-1.7x, most 0.9-1.3x)
SPREAD = (0.9, 1.15, 1.0, 0.85, 1.1, 0.95)


def congested_phase(mon: NetworkMonitor, probe_speedup: float = 3.0, spread=SPREAD) -> None:
    """int8 periods at the share (``spread``: each period's time over the share's), ten
    top-k steps, one fp16 probe that completes at ``probe_speedup`` x the share (its bytes
    not yet through the queue) with the next top-k step paying the rest, ten more top-k."""
    mon.add(4, RTT)
    for f in spread:
        mon.add(INT8, RTT + f * INT8 / SHARE)
    for _ in range(10):
        mon.add(TOPK, period(TOPK, SHARE))
    mon.add(FP16, period(FP16, probe_speedup * SHARE))
    mon.add(TOPK, period(TOPK, SHARE, debt=FP16 / SHARE - FP16 / (probe_speedup * SHARE)))
    for _ in range(10):
        mon.add(TOPK, period(TOPK, SHARE))


def test_beside_competing_flows_the_estimate_is_the_share_not_the_luckiest_burst():
    """The max filter (BBR's, the default before issue 49) keeps the lone probe's 3x; the
    sustained filter the most of the int8 periods sent step after step."""
    new, old = NetworkMonitor(rate_filter="sustained"), NetworkMonitor(rate_filter="max")
    for mon in (new, old):
        congested_phase(mon)
    assert new.estimate().max_rate == pytest.approx(SHARE / 0.85, rel=1e-6)  # within 25 %
    assert old.estimate().max_rate == pytest.approx(3 * SHARE, rel=1e-6)


def test_alone_on_the_link_large_messages_read_the_link():
    """Idle: int8 every step at the link's rate (up to 5 % slower), a 60 kB top-k step
    between them now and then: the estimate is the link, as the max filter's."""
    mon = NetworkMonitor(rate_filter="sustained")
    mon.add(4, RTT)
    for i in range(30):
        mon.add(INT8, period(INT8, LINK) * (1 + 0.05 * ((i * 7) % 5) / 4))
        if i % 10 == 9:
            mon.add(TOPK, period(TOPK, LINK))
    assert 0.97 * LINK <= mon.estimate().max_rate <= LINK


def test_small_messages_are_no_rate_samples_and_a_lone_large_one_is_isolated():
    mon = NetworkMonitor(rate_filter="sustained")
    mon.add(4, RTT)
    for _ in range(10):
        assert not mon.add(TOPK, period(TOPK, 20 * LINK))  # inside a shaper's burst: fast
    assert mon.estimate().max_rate is None
    assert mon.add(FP16, period(FP16, LINK))
    assert mon.estimate().max_rate == pytest.approx(LINK)
    assert not mon.last_rate_sustained  # the period before it was a top-k step
    assert mon.add(FP16, period(FP16, LINK)) and mon.last_rate_sustained
    b, s, r = mon.last_rate_sample
    assert b / (s - r) == pytest.approx(mon.estimate().max_rate)  # re-derivable offline


def test_isolated_samples_alone_give_their_minimum():
    """No sustained sample in the window: lone probes err high beside competing flows (a
    burst after a quiet spell), so the least of them."""
    mon = NetworkMonitor(rate_filter="sustained")
    mon.add(4, RTT)
    for speedup in (3.0, 1.5, 2.0):
        for _ in range(5):
            mon.add(TOPK, period(TOPK, SHARE))
        mon.add(FP16, period(FP16, speedup * SHARE))
    assert mon.estimate().max_rate == pytest.approx(1.5 * SHARE)
    assert NetworkMonitor().rate_filter == "sustained"  # the default since issue 49's ab
    assert NetworkMonitor(rate_filter="max").rate_filter == "max"


def test_a_faster_path_is_believed_once_the_sustained_samples_are_old():
    """Congestion ends while the job sends top-k: a lone probe at the link's rate does not
    outvote the sustained share at once (it may be a burst's luck), but once the sustained
    samples are ``rate_max_age`` samples old it is the estimate."""
    mon = NetworkMonitor(rate_filter="sustained", rate_max_age=32)
    congested_phase(mon)
    mon.add(FP16, period(FP16, LINK))
    assert mon.estimate().max_rate == pytest.approx(SHARE / 0.85)
    for _ in range(20):
        mon.add(TOPK, period(TOPK, LINK))
    mon.add(FP16, period(FP16, LINK))
    assert mon.estimate().max_rate == pytest.approx(LINK)


def test_paired_samples_carry_what_the_period_left_queued():
    """``pair_next``: each rate-sized period is taken with the payload period after it, which
    pays for the bytes still queued when the first completed on this rank. Int8 periods that
    alternate 0.6x / 1.4x of the share's time and a probe completing at 3x, its rest paid by
    the next top-k step, read the share; unpaired, the 0.6x periods read 1.67x."""
    spread = (0.6, 1.4) * 3
    paired = NetworkMonitor(rate_filter="sustained", pair_next=True)
    single = NetworkMonitor(rate_filter="sustained")
    for mon in (paired, single):
        congested_phase(mon, spread=spread)
    assert paired.estimate().max_rate == pytest.approx(SHARE, rel=1e-6)
    assert single.estimate().max_rate == pytest.approx(SHARE / 0.6, rel=1e-6)
    # a lone period waits for the next one; a restart drops the one in flight
    mon = NetworkMonitor(rate_filter="sustained", pair_next=True)
    mon.add(4, RTT)
    assert not mon.add(FP16, period(FP16, LINK)) and mon.estimate().max_rate is None
    assert mon.add(TOPK, period(TOPK, LINK))
    assert mon.last_rate_sample[0] == FP16 + TOPK
    assert mon.estimate().max_rate == pytest.approx(LINK)
    assert not mon.add(INT8, period(INT8, LINK))
    mon.restart_rate()
    assert not mon.add(TOPK, period(TOPK, SHARE)) and mon.estimate().max_rate is None


def test_the_window_of_tagged_samples():
    w = SustainedWindow(3, max_age=10)
    w.add(5.0, sustained=False, at=1)
    w.add(2.0, sustained=False, at=2)
    assert w.value() == 2.0  # isolated only: their minimum
    w.add(3.0, sustained=True, at=3)
    w.add(4.0, sustained=True, at=4)
    assert w.value() == 4.0  # the sustained maximum; 5.0 left the window anyway
    w.add(6.0, sustained=False, at=14)
    w.now = 14
    assert w.value() == 4.0  # 4.0 is 10 samples old: still speaks
    w.now = 15
    assert w.value() == 6.0 and w.count == 5  # sustained ones older than max_age: ignored
    w.clear()
    assert w.value() is None
