"""How the communicator's recorder turns collectives into monitor samples (netsenseml.comm).

Synthetic launch/completion times (``at=``), so each rule is checked exactly: payloads in
flight together are one sample, tiny collectives are their own, the RTT probe beside the
payloads moves neither the period's start nor its end. The gloo behaviour that
makes the first rule necessary (collectives of one group run concurrently) is checked on
real processes in ``test_hooks_distributed.py`` ("recorder").
"""

import pytest
import torch

from netsenseml.comm import CommRecorder


class Sink:
    def __init__(self) -> None:
        self.samples: list[tuple[float, float, bool]] = []

    def add(self, nbytes, seconds, t=None, rate_ok=True):
        self.samples.append((nbytes, seconds, rate_ok))


class PrototypeSink:
    """The prototype rule's interface: no rate_ok."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    def add(self, nbytes, seconds, t=None):
        self.samples.append((nbytes, seconds))


def test_payloads_in_flight_together_are_one_sample():
    sink = Sink()
    rec = CommRecorder(sink)
    a = rec.launch(1_000_000, at=10.0)
    b = rec.launch(1_200_000, at=10.001)
    rec.done(b, at=10.030)  # gloo may finish the later one first
    assert sink.samples == []
    rec.done(a, at=10.040)
    assert sink.samples == [(2_200_000, pytest.approx(0.040), True)]
    assert rec.busy_s == pytest.approx(0.040) and rec.bytes_sent == 2_200_000


def test_a_reading_while_a_collective_is_in_flight_counts_the_time_it_has_run():
    rec = CommRecorder(Sink())
    a = rec.launch(1_000_000, at=2.0)
    assert rec.totals(at=2.010).busy_s == pytest.approx(0.010)  # open: counted up to now
    rec.done(a, at=2.030)
    assert rec.totals(at=2.050).busy_s == pytest.approx(0.030)  # closed: no idle time
    b = rec.launch(1_000_000, at=3.0)
    first = rec.totals(at=3.004).busy_s
    rec.done(b, at=3.010)
    assert rec.totals(at=3.5).busy_s - first == pytest.approx(0.006)  # the rest, once


def test_a_payload_after_the_previous_period_starts_at_the_later_of_launch_and_that_end():
    sink = Sink()
    rec = CommRecorder(sink)
    a = rec.launch(1_000_000, at=1.0)
    rec.done(a, at=1.020)
    # stamped before a's completion (another thread's clock read), counted after it: the
    # link was busy with a until 1.020
    b = rec.launch(500_000, at=1.010)
    rec.done(b, at=1.030)
    c = rec.launch(500_000, at=1.040)  # the link idle since 1.030: starts at its launch
    rec.done(c, at=1.050)
    assert [s[0] for s in sink.samples] == [1_000_000, 500_000, 500_000]
    assert [s[1] for s in sink.samples] == [pytest.approx(0.020), pytest.approx(0.010),
                                            pytest.approx(0.010)]


def test_tiny_collectives_are_their_own_samples_and_leave_the_period_open():
    sink = Sink()
    rec = CommRecorder(sink)
    p = rec.launch(1_000_000, at=0.0)
    t = rec.launch(4, at=0.005)
    rec.done(t, at=0.0053)
    assert sink.samples == [(4, pytest.approx(0.0003), True)]
    rec.done(p, at=0.020)
    assert sink.samples[-1] == (1_000_000, pytest.approx(0.020), True)


def test_the_rtt_probe_beside_the_payload_does_not_move_its_start():
    """The payload's bytes flow from its launch (gloo runs it beside the probe), and the
    probe's completion is timed late when its callback waits for the GIL: a start moved
    to it would cut transfer time out of the sample and read the link too fast."""
    sink = Sink()
    rec = CommRecorder(sink)
    probe = rec.launch(4, at=0.0)
    p = rec.launch(1_000_000, at=0.0001)
    rec.done(probe, at=0.006)  # the probe's callback, 6 ms late
    rec.done(p, at=0.016)
    assert sink.samples[0] == (4, pytest.approx(0.006), True)
    assert sink.samples[1] == (1_000_000, pytest.approx(0.0159), True)


def test_one_member_that_cannot_mean_a_rate_makes_the_period_rtt_only():
    sink = Sink()
    rec = CommRecorder(sink)
    a = rec.launch(1_000_000, at=0.0)
    b = rec.launch(1_000_000, at=0.0, rate_ok=False)
    rec.done(a, at=0.01)
    rec.done(b, at=0.02)
    assert sink.samples == [(2_000_000, pytest.approx(0.02), False)]


def test_equivalent_bytes_are_what_the_monitor_gets_and_handed_bytes_what_is_counted():
    sink = Sink()
    rec = CommRecorder(sink)
    g = rec.launch(100_000, at=0.0, equiv=200_000)  # a 4-rank all-gather's input x W/2
    rec.done(g, at=0.01)
    assert sink.samples == [(200_000, pytest.approx(0.01), True)] and rec.bytes_sent == 100_000


def test_prototype_mode_gives_each_collective_its_launch_to_completion_time():
    sink = PrototypeSink()
    rec = CommRecorder(sink, service_time=False)
    a = rec.launch(1_000_000, at=0.0)
    b = rec.launch(1_000_000, at=0.001)
    rec.done(a, at=0.01)
    rec.done(b, at=0.02)
    assert sink.samples == [(1_000_000, pytest.approx(0.01)), (1_000_000, pytest.approx(0.019))]


def test_kept_gather_buffers_are_one_set_a_key_of_its_latest_capacity() -> None:
    """Payload mode keeps a bucket's all-gather buffers; a new capacity (DDP's rebuilt
    buckets, an adaptive level) replaces the set instead of adding one."""
    from netsenseml.comm import GatherBuffers

    pool = GatherBuffers()
    send, outs = pool.get(3, 100, 4, torch.device("cpu"))
    assert send.numel() == 100 and [o.numel() for o in outs] == [100] * 4
    again = pool.get(3, 100, 4, torch.device("cpu"))
    assert again[0] is send and all(a is b for a, b in zip(again[1], outs, strict=True))
    bigger = pool.get(3, 250, 4, torch.device("cpu"))
    assert bigger[0].numel() == 250 and bigger[0] is not send
    pool.get(4, 100, 4, torch.device("cpu"))
    assert len(pool._sets) == 2  # buckets 3 and 4, one set each
