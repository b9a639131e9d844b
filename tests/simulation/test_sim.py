"""The SimGrid engine against what a ring must do, in real SimGrid (no mocks).

Each case is a property the simulation has to have for its predictions to mean anything:
a ring allreduce on an idle star takes the closed form's time (the analytic model of
``testbed.simulation.model`` as the check), an all-gather's step grows with W while an
allreduce's per-worker volume does not, competing flows slow a step, the fabrics for scale
build at 1024 hosts and a prediction there completes, and the extrapolation of steady
ring phases agrees with simulating every phase. Skipped only where SimGrid cannot be
imported (``make setup`` installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.simulation import engine
from testbed.simulation.model import FlowModel, LinkCalibration, StepInput
from testbed.simulation.platform import Fabric
from testbed.simulation.sim import Compute, CrossFlow, Job, simulate_isolated

pytestmark = pytest.mark.skipif(not engine.available(),
                                reason="simgrid not importable (make setup installs it)")

RATE_MBIT = 20.0
B = 340_000.0  # the sim-validate MLP's fp32 gradient
LAT = 50e-6  # the platform's per-link latency: a route on a star is two links
NO_COMPUTE = Compute({"none": 0.0, "topk:0.01": 0.0})


def _job(method: str, w: int, **kw: object) -> Job:
    args: dict[str, object] = {"fabric": Fabric("star", w, RATE_MBIT, cross=1),
                               "method": method, "dense_bytes": B, "batch_size": 16,
                               "compute": NO_COMPUTE, "htb": False, "steps": 4}
    args.update(kw)
    return Job(**args)  # type: ignore[arg-type]


def _steps(jobs: list[Job]) -> list[float]:
    return [r.steps[-1].step_s for r in simulate_isolated(jobs, workers=2)]


def test_ring_allreduce_matches_the_closed_form() -> None:
    got = _steps([_job("allreduce", 2), _job("allreduce", 4)])
    model = FlowModel(LinkCalibration(alpha_s=2 * LAT, eta=1.0))
    for w, step in zip((2, 4), got, strict=True):
        want = model.comm_s(StepInput(n=w, collective="allreduce", payload_bytes=B,
                                      rate_mbit=RATE_MBIT, compute_s=0.0))
        assert step == pytest.approx(want, rel=0.02), (w, step, want)


def test_allgather_grows_with_workers_allreduce_does_not() -> None:
    ar4, ar16, tk4, tk16 = _steps([_job("allreduce", 4), _job("allreduce", 16),
                                   _job("topk:0.01", 4), _job("topk:0.01", 16)])
    assert ar16 / ar4 < 1.3  # 2(W-1)/W: 1.5 -> 1.875
    assert tk16 / tk4 > 4.0  # (W-1) x B: 3 -> 15


def test_cross_flows_slow_a_step() -> None:
    cross = (CrossFlow("x0", "w1", 4, 0.0),)
    idle, busy = _steps([_job("allreduce", 4, steps=6),
                         _job("allreduce", 4, steps=6, cross=cross)])
    # w1's downlink carries 4 bulk flows and the ring's one: a fifth of the rate
    assert busy > 3.0 * idle


def test_htb_bucket_makes_small_messages_cheap() -> None:
    # 10 ms of compute refills 25 kB of a 67 kB bucket per step; a step sends 3 x 6.8 kB
    comp = Compute({"topk:0.01": 0.010})
    with_bucket, without = simulate_isolated([
        _job("topk:0.01", 4, htb=True, compute=comp, steps=8),
        _job("topk:0.01", 4, htb=False, compute=comp, steps=8)], workers=2)
    assert with_bucket.steps[-1].comm_s < 0.2 * without.steps[-1].comm_s
    # without idle time between steps the bucket drains and the rate limits again
    drained = simulate_isolated([_job("topk:0.01", 4, htb=True, steps=8)])[0]
    assert drained.steps[-1].comm_s == pytest.approx(without.steps[-1].comm_s, rel=0.05)


@pytest.mark.parametrize("kind", ["fattree", "dragonfly"])
def test_1024_hosts_build_and_a_short_prediction_completes(kind: str) -> None:
    fab = Fabric(kind, 1024, 1000.0, background=4)
    res = simulate_isolated([_job("allreduce", 1024, fabric=fab, steps=3, extrapolate=True,
                                  dense_bytes=4e7)])[0]
    assert len(res.steps) == 3 and all(s.step_s > 0 for s in res.steps)
    assert res.steps[-1].phases_simulated < 2 * 1023  # steady phases were extrapolated


def test_extrapolation_agrees_with_the_full_simulation() -> None:
    fab = Fabric("fattree", 32, 1000.0, background=2)
    full, short = simulate_isolated([_job("allreduce", 32, fabric=fab, dense_bytes=4e7),
                                     _job("allreduce", 32, fabric=fab, dense_bytes=4e7,
                                          extrapolate=True)], workers=2)
    assert short.steps[-1].phases_simulated < full.steps[-1].phases_simulated
    assert short.steps[-1].step_s == pytest.approx(full.steps[-1].step_s, rel=0.01)


def test_netsenseml_compresses_on_a_slow_star_not_on_a_fast_one() -> None:
    comp = Compute({"none": 0.004, "fp16": 0.004, "int8": 0.005, "topk:0.01": 0.005,
                    "topk:0.1": 0.005})
    slow, fast = simulate_isolated([
        _job("netsenseml", 4, compute=comp, steps=12, htb=True),
        _job("netsenseml", 4, compute=comp, steps=12, htb=True,
             fabric=Fabric("star", 4, 100_000.0, cross=1))], workers=2)
    assert slow.steps[-1].level != "none"
    assert slow.steps[-1].bytes_sent < fast.steps[-1].bytes_sent


def test_per_message_cpu_grows_with_the_message_up_to_its_cap() -> None:
    # a flat 1.5 ms charged a 1-byte probe message in full; a size-dependent cost charges
    # it msg_fixed_s, and a message at or beyond the cap the full msg_fixed_s + msg_cpu_s
    from testbed.simulation.sim import NetCalibration, message_cpu_s
    size_dep = NetCalibration(msg_fixed_s=2e-4, msg_cpu_s=1.3e-3, msg_cap_bytes=8e3)
    assert message_cpu_s(size_dep, 1.0) == pytest.approx(2e-4, rel=1e-3)
    assert message_cpu_s(size_dep, 4e3) == pytest.approx(2e-4 + 0.65e-3)
    assert message_cpu_s(size_dep, 1e6) == pytest.approx(1.5e-3)
    assert message_cpu_s(NetCalibration(msg_cpu_s=1.5e-3), 1.0) == 1.5e-3  # cap 0: flat
    # in SimGrid: an 8-rank 1-byte all-gather (7 phases) costs ~7 x 0.2 ms more than none,
    # where the flat cost makes it ~7 x 1.5 ms
    flat = Job(fabric=Fabric("star", 8, RATE_MBIT, cross=1), method="topk:0.01",
               dense_bytes=4.0 / 0.02, batch_size=16, compute=NO_COMPUTE, htb=True, steps=2,
               cal=NetCalibration(msg_cpu_s=1.5e-3))
    small, big = simulate_isolated([
        Job(**{**flat.__dict__, "cal": size_dep}), flat], workers=2)
    assert small.steps[-1].comm_s < 0.5 * big.steps[-1].comm_s
    assert big.steps[-1].comm_s == pytest.approx(7 * (1.5e-3 + 2 * LAT), rel=0.05)


def test_short_messages_wait_longer_only_through_a_full_queue() -> None:
    # 4 ranks, top-k 1 % (6.8 kB messages, 3 ring phases a step) and allreduce (85 kB
    # chunks): with short_bytes = 32 kB only top-k's phases pay 30 ms, only while the
    # cross flow runs, and each phase once
    from testbed.simulation.sim import NetCalibration
    extra = NetCalibration(short_wait_s=0.03, short_bytes=32e3)
    cross = (CrossFlow("x0", "w1", 4, 0.0),)
    tk, tk_extra, tk_idle, tk_idle_extra, ar, ar_extra = simulate_isolated([
        _job("topk:0.01", 4, steps=6, cross=cross),
        _job("topk:0.01", 4, steps=6, cross=cross, cal=extra),
        _job("topk:0.01", 4, steps=6),
        _job("topk:0.01", 4, steps=6, cal=extra),
        _job("allreduce", 4, steps=6, cross=cross),
        _job("allreduce", 4, steps=6, cross=cross, cal=extra)], workers=2)
    assert tk_extra.steps[-1].comm_s - tk.steps[-1].comm_s == pytest.approx(3 * 0.03, rel=0.02)
    # no cross traffic: no full queue, no extra wait
    assert tk_idle_extra.steps[-1].comm_s == pytest.approx(tk_idle.steps[-1].comm_s, rel=1e-6)
    assert ar_extra.steps[-1].comm_s == pytest.approx(ar.steps[-1].comm_s, rel=1e-6)


def test_the_ring_waits_for_the_last_ranks_compute() -> None:
    even = Compute({"none": 0.010})
    skewed = Compute({"none": 0.010}, critical={"none": 0.030})
    a, b = simulate_isolated([_job("allreduce", 4, compute=even, steps=4),
                              _job("allreduce", 4, compute=skewed, steps=4)])
    ra, rb = a.steps[-1], b.steps[-1]
    assert rb.step_s - ra.step_s == pytest.approx(0.020, rel=0.05)
    # recorded as steps.csv does, from the mean rank: its own compute, the wait in its comm
    assert ra.compute_s == rb.compute_s == pytest.approx(0.010)
    assert rb.comm_s - ra.comm_s == pytest.approx(0.020, rel=0.05)


def test_a_step_count_under_cross_traffic_counts_the_steps_after_it_started() -> None:
    # 10 ms steps and streams from 0.5 s: a count from the first step would end before
    # the streams start (a calibration run of top-k 1 % at 3 workers was "predicted" idle)
    comp = Compute({"topk:0.01": 0.010})
    res, = simulate_isolated([_job("topk:0.01", 2, compute=comp, htb=True, steps=5,
                                   cross=(CrossFlow("x0", "w1", 4, 0.5),))])
    assert res.cross_started_t == pytest.approx(0.5)
    after = [s for s in res.steps if s.t > res.cross_started_t]
    assert len(after) == 5
    assert len(res.steps) > 40  # the ~50 steps of the first half second come first


def test_a_standing_queue_overlaps_a_transfer_by_queue_overlap() -> None:
    # 2 ranks, int8 (85 kB all-gather messages), w1's downlink shared with one bulk flow
    # (cross_weight 0.25 of 4 streams): the message takes 85 kB / 1.25 MB/s = 68 ms at its
    # share, the standing queue 100 frames of 1514 B at 2.5 MB/s = 61 ms. Overlap 0 adds
    # them, 1 takes the larger, 0.5 half-way.
    from testbed.simulation.sim import NetCalibration
    cross = (CrossFlow("x0", "w1", 4, 0.0),)
    base = NetCalibration(cross_weight=0.25)
    runs = simulate_isolated([
        _job("int8", 2, steps=4, cross=cross, cal=NetCalibration(cross_weight=0.25,
                                                                 queue_fraction=0.0)),
        *[_job("int8", 2, steps=4, cross=cross,
               cal=NetCalibration(cross_weight=0.25, queue_overlap=o)) for o in (0.0, 0.5, 1.0)],
    ], workers=2)
    transfer, add, half, over = (r.steps[-1].comm_s for r in runs)
    wait = 100 * 1514 / 2.5e6
    assert transfer == pytest.approx(85_000 / 1.25e6, rel=0.05)
    assert add == pytest.approx(transfer + wait, rel=0.02)
    assert over == pytest.approx(max(transfer, wait), rel=0.02)
    assert half == pytest.approx(transfer + wait - 0.5 * min(transfer, wait), rel=0.02)
    assert base.queue_overlap == 0.0  # the earlier model stays the default


def test_the_standing_queue_is_a_share_of_the_measured_backlog() -> None:
    from testbed.simulation.sim import NetCalibration, standing_queue_bytes
    full = 100 * 1514
    assert standing_queue_bytes(NetCalibration(queue_fraction=0.5), 100) == 0.5 * full
    assert standing_queue_bytes(NetCalibration(queue_fraction=0.5, queue_fill=2.0),
                                100) == full
    assert standing_queue_bytes(NetCalibration(queue_bytes=9e4, queue_fill=2.0), 100) == 9e4


def test_stellatrain_fits_its_fraction_to_the_simulated_link() -> None:
    """The StellaTrain peer runs its real policy in the simulated step loop. Its first
    decision (step 4 + 3) comes from the goodput of its start's 1 % top-k, a transfer so
    short that latency, not the link, sets it; then a 20 Mbit/s star makes the accelerator
    wait and the target backs off by a quarter per decision (every 8 steps), while on a
    100 Gbit/s star nobody waits and everything fits: fp32 allreduce."""
    comp = Compute({"none": 0.004, "fp16": 0.004, "int8": 0.005, "topk:0.01": 0.005,
                    "topk:0.1": 0.005})
    slow, fast = simulate_isolated([
        _job("stellatrain", 2, compute=comp, steps=40, htb=True),
        _job("stellatrain", 2, compute=comp, steps=40, htb=True,
             fabric=Fabric("star", 2, 100_000.0, cross=1))], workers=2)
    assert [(s.level, s.ratio) for s in slow.steps[:6]] == [("topk", pytest.approx(0.01))] * 6
    kept = [s.ratio for s in slow.steps[6:]]
    assert all(s.level == "topk" for s in slow.steps) and kept == sorted(kept, reverse=True)
    assert kept[-1] < 0.5 * kept[0]
    assert fast.steps[-1].level == "none"


def test_the_simulation_refuses_adaptive_methods_it_cannot_run() -> None:
    """Accordion decides from gradient norms, which a simulation has none of."""
    from testbed.simulation.sim import SIMULATED_ADAPTIVE, level_of

    assert "accordion" not in SIMULATED_ADAPTIVE
    with pytest.raises(ValueError, match="stellatrain"):
        level_of("accordion")


def test_a_simulation_whose_parent_died_ends_with_it(tmp_path: Path) -> None:
    """``engine.run_isolated``'s child sends its result up a pipe; where its parent was
    killed (a test's timeout, a user's ^C) the send must fail and the child end, not
    block for ever on a pipe whose only reader left is the fork's own copy (it did: the
    tiny benchmark runs found two such orphans)."""
    root = Path(__file__).resolve().parents[2]
    pid_file = tmp_path / "pid"
    script = (f"import os, sys, time\nsys.path.insert(0, {str(root)!r})\n"
              "from testbed.simulation import engine\n"
              "def fn(_):\n"
              f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
              "    time.sleep(1.0)\n"
              "    return 'x' * (1 << 20)  # more than a pipe's buffer holds\n"
              "engine.run_isolated(fn, [0])\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    child = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "gone"
            if state in ("gone", "Z"):
                break
            time.sleep(0.1)
        assert state in ("gone", "Z"), f"the orphaned simulation {child} is still {state}"
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None:
            try:
                os.kill(child, 9)
            except ProcessLookupError:
                pass
