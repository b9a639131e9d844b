"""End-to-end runs in a real emulated network: smoke, cross-traffic, SIGINT, worker crash.

Every test builds real namespaces and shaped links, starts real DDP workers (gloo) and real
iperf3 flows, and checks the run folder and that nothing of the run is left: no interface
with the run's prefix (``ip -br link``), no registry entry (``leftovers.find``), and none
of the PIDs the run recorded in pids.json alive. Results go to pytest temp dirs.

Durations on the shared 2-core machine are dominated by the workers importing torch
(10-25 s per run under load), not by the network (build and teardown take well under a
second; see summary.json build_s/teardown_s).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.analysis import tables
from testbed.config.scenario import apply_overrides, load_scenario
from testbed.emulation import kernel
from testbed.orchestration.run import run_scenario
from tests.orchestration.run_checks import assert_nothing_left, run_dirs
from topologies import spec

NETSENSE = Path(sys.executable).parent / "netsense"

pytestmark = pytest.mark.emulation


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _pids_recorded(run: Path, rank: int) -> bool:
    try:
        return len(json.loads((run / "pids.json").read_text())["workers"]) > rank
    except (OSError, ValueError, KeyError):
        return False


def wait_new_run(root: Path, old: set[Path], rank: int, timeout: float = 180) -> Path:
    """Wait until a run folder not in `old` has a step record of `rank`; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in run_dirs(root):
            jl = d / "workers" / f"rank{rank}.jsonl"
            if d not in old and jl.exists() and '"kind": "step"' in jl.read_text(
                    errors="replace") and _pids_recorded(d, rank):
                return d
        time.sleep(0.3)
    raise AssertionError(f"no new run under {root} reached a step within {timeout} s")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """`netsense run smoke` exactly as `make experiment` runs it."""
    root = tmp_path_factory.mktemp("smoke")
    t = time.monotonic()
    proc = subprocess.run([str(NETSENSE), "run", "smoke", "--results", str(root)],
                          capture_output=True, text=True, timeout=300)
    return proc, root, time.monotonic() - t


def test_smoke_completes_ok_for_both_methods(smoke):
    proc, root, seconds = smoke
    print(f"smoke: {seconds:.1f} s for both methods (build+train+teardown)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "allreduce" in proc.stdout and "netsenseml" in proc.stdout  # the final table
    dirs = run_dirs(root)
    assert len(dirs) == 2
    runs, _ = tables.load_runs(root)  # the tables' numbers are summary.json's (one definition)
    assert (runs["throughput"] - runs["throughput_summary"]).abs().max() < 1e-2
    assert list(runs["tta_s"].isna()) == list(runs["tta_s_summary"].isna())
    assert ((runs["tta_s"] - runs["tta_s_summary"]).dropna().abs() < 1e-6).all()
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "ok", summary
        assert summary["throughput_samples_per_s"] > 0
        assert summary["bytes_sent_total"] > 0 and summary["steps"] > 2
        steps = pd.read_csv(d / "steps.csv")
        assert set(steps["rank"]) == {0, 1}
        events = pd.read_csv(d / "events.csv")
        assert list(events["kind"]) == ["set_rate"]
        # events and steps share the run clock: the rate cut lands inside training
        assert steps["t"].min() <= events["t_applied"][0] <= steps["t"].max() + 1.0
        assert events["t_applied"][0] >= events["t_scheduled"][0] - 0.05
        config = json.loads((d / "config.json").read_text())
        assert config["method"] == summary["method"] and config["scenario"]["name"] == "smoke"
        # no topology.congestion_control: the hosts' TCP is the testbed's default, and says so
        assert config["scenario"]["topology"]["congestion_control"] is None
        assert config["tcp_congestion_control"] == (
            spec.DEFAULT_CONGESTION_CONTROL
            if spec.DEFAULT_CONGESTION_CONTROL in kernel.available_congestion_controls()
            else kernel.default_congestion_control())
        assert (d / "workers" / "rank0.log").stat().st_size > 0
        assert_nothing_left(d)
    # Generous bound: the target is < 60 s; torch start-up under other helpers' load varies.
    assert seconds < 180


def _windows(run_dir: Path) -> tuple[pd.DataFrame, float, float]:
    steps = pd.read_csv(run_dir / "steps.csv")
    events = pd.read_csv(run_dir / "events.csv")
    start = float(events.loc[events["kind"] == "cross_start", "t_applied"].iloc[0])
    stop = float(events.loc[events["kind"] == "cross_stop", "t_applied"].iloc[0])
    r0 = steps[(steps["rank"] == 0) & steps["comm_s"].notna()]
    return r0, start, stop


COMM_FACTOR = 2.0  # measured 5-7x on this machine (50 Mbit/s, 8 competing streams)


@pytest.fixture(scope="module")
def cross(tmp_path_factory):
    """star-crosstraffic (8 iperf3 streams x0 -> w1) once per method, on 500 Mbit/s
    access links: before the streams the link does not limit NetSenseML's step, so the
    test sees its graded response (at the scenario's 50 Mbit/s it already sits at the
    top-k floor before congestion, with nothing left to give). Only as long as the checks
    need: 2 s before the streams (NetSenseML's first 20 steps and ten more: it makes ~90
    steps a second here, allreduce ~43), 3 s of them (the checks' windows held 195 and 20
    steps of 5 s, need 10 and 3) and 1 s after (the stop is applied), 6 s a run instead of
    the scenario's 18."""
    scn = apply_overrides(load_scenario("star-crosstraffic"), {
        "topology.rate_mbit": 500, "timeline.0.at_s": 2, "timeline.1.at_s": 5,
        "workload.time_limit_s": 6})
    root = tmp_path_factory.mktemp("cross")
    return {m: run_scenario(scn, m, 0, root / m, progress=False)
            for m in ("allreduce", "netsenseml")}


def test_cross_traffic_raises_allreduce_comm_time(cross):
    outcome = cross["allreduce"]
    assert outcome.status == "ok", outcome.summary
    assert_nothing_left(outcome.run_dir)
    r0, start, stop = _windows(outcome.run_dir)
    before = r0[(r0["t"] < start) & (r0["step"] > 2)]["comm_s"]
    during = r0[(r0["t"] > start + 0.5) & (r0["t"] <= stop)]["comm_s"]
    assert len(before) >= 5 and len(during) >= 3, (len(before), len(during))
    factor = during.mean() / before.mean()
    print(f"allreduce comm_s per step: before {before.mean():.3f} s, during "
          f"{during.mean():.3f} s, factor {factor:.1f}")
    assert factor >= COMM_FACTOR


def test_cross_traffic_is_sensed_by_netsenseml(cross):
    """Cross traffic reaches the policy's inputs: its step model sees the congested link.

    The claim this test once made -- the kept ratio falls during congestion -- is not what
    a time-to-accuracy policy owes here. Measured on this scenario (8 drop-tail streams
    sharing w1's downlink): the congestion adds a *fixed* cost to every collective (the
    model's ``a_k`` rose from 1-4 ms to 16-18 ms) while the marginal all-gather rate fell
    only from ~170 to ~115 Mbit/s, so sending fewer bytes buys little and costs steps; the
    policy stayed near its level or went less compressed, and on CI it sat at the top-k
    floor before the streams began (nothing left to give). Where bytes *are* what costs
    (the crossover scenarios: bottleneck at 200 Mbit/s shared with 8 streams), NetSenseML
    sends 0.02-0.05 of the dense bytes in congested phases against 0.25 idle
    (results/README.md, crossover). What must hold everywhere is that the model follows
    the link: its predicted step stays near the measured one under the congestion, and the
    adaptive method's steps stay below dense allreduce's.
    """
    outcome = cross["netsenseml"]
    assert outcome.status == "ok", outcome.summary
    assert_nothing_left(outcome.run_dir)
    r0, start, stop = _windows(outcome.run_dir)
    before = r0[(r0["t"] < start) & (r0["step"] > 20)]
    during = r0[(r0["t"] > start + 1.0) & (r0["t"] <= stop)]
    assert len(before) >= 10 and len(during) >= 10, (len(before), len(during))
    rise = during["model_step_s"].median() / before["model_step_s"].median()
    fit = (during["model_step_s"] / during["step_s"]).median()
    print(f"netsenseml model_step_s: before {before['model_step_s'].median() * 1e3:.1f} ms, "
          f"during {during['model_step_s'].median() * 1e3:.1f} ms (x{rise:.1f}); measured "
          f"step during {during['step_s'].median() * 1e3:.1f} ms (model/measured {fit:.2f})")
    # (the rise is information, not a claim: the better the policy adapts, the less the
    # predicted step of the level it picks rises; measured x1.2-3.2)
    assert 0.6 <= fit <= 1.4, "the step model does not follow the congested link"
    dense, d_start, d_stop = _windows(cross["allreduce"].run_dir)
    dense_during = dense[(dense["t"] > d_start + 1.0) & (dense["t"] <= d_stop)]["step_s"].median()
    # how hard 8 streams hit the dense steps varies run to run (median 94-180 ms here), and
    # the first congested steps are NetSenseML's reaction time, so the claim is only that
    # adapting never costs more than staying dense (measured ratio 0.12-0.81 in 9 runs)
    ratio = during["step_s"].median() / dense_during
    print(f"netsenseml / allreduce step during congestion: {ratio:.2f}")
    assert ratio < 1.0, (during["step_s"].median(), dense_during)


def _netsense_bg(root: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(NETSENSE), "run", "smoke", "--method", "allreduce", "--quiet", "--results", str(root),
         "--set", "workload.time_limit_s=120", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigint_mid_training_tears_down_and_marks_failed(smoke):
    _, root, _ = smoke
    before, old = digest(root), set(run_dirs(root))
    proc = _netsense_bg(root)
    try:
        new = wait_new_run(root, old, rank=0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    summary = json.loads((new / "summary.json").read_text())
    assert summary["status"] == "failed" and "interrupted by SIGINT" in summary["reason"]
    assert summary["steps"] >= 1
    assert_nothing_left(new)
    after = digest(root)
    assert {k: v for k, v in after.items() if k in before} == before  # earlier runs intact


def test_worker_crash_fails_run_and_tears_down(smoke):
    _, root, _ = smoke
    before, old = digest(root), set(run_dirs(root))
    proc = _netsense_bg(root)
    try:
        new = wait_new_run(root, old, rank=1)
        victim = json.loads((new / "pids.json").read_text())["workers"][1]
        os.kill(victim, signal.SIGKILL)  # a real crash of rank 1 mid-training
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    summary = json.loads((new / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "worker rank 1 exited with code -9" in summary["reason"], summary["reason"]
    assert "failed" in out  # the final table says so too
    assert_nothing_left(new)
    after = digest(root)
    assert {k: v for k, v in after.items() if k in before} == before
