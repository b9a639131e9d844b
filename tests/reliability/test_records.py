"""Every folder and interface the tool
creates ends in a true, final state whatever moment an interruption hits.

Real emulation: real `netsense` processes, killed or interrupted for real; `netsense clean`
repairs the records of dead orchestrators and removes their leftovers; a killed `doctor`'s
probe interfaces are registered and removed by `clean`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testbed.analysis import tables
from testbed.emulation import leftovers
from tests.reliability.helpers import (
    NETSENSE,
    assert_run_left_nothing,
    env_for,
    run_cli,
    state_empty,
)

pytestmark = pytest.mark.emulation

SCENARIO = """name: rel
topology: {kind: star, n_workers: 2, n_cross: 0, rate_mbit: 100}
workload: {model: mlp, dataset: digits, batch_size: 16, %s, args: {width: 64}}
methods: [allreduce]
seeds: [0, 1]
timeline:
%s
"""


def _write(tmp_path: Path, length: str, timeline: str = "  []") -> str:
    p = tmp_path / "rel.yaml"
    p.write_text(SCENARIO % (length, timeline))
    return str(p)


def _summaries(root: Path) -> dict[Path, dict]:
    return {p.parent: json.loads(p.read_text()) for p in root.rglob("summary.json")}


def _wait(cond, timeout: float = 180, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError("timed out waiting")


def test_event_after_a_step_counted_run_fails_the_run(tmp_path):
    """Valid (before the deadline) but never reached: failed, with the reason; no traceback."""
    proc = run_cli(["run", _write(tmp_path, "steps: 3", "  - {at_s: 300, kind: set_rate, "
                                  "link: w1, rate_mbit: 10}"), "--seed", "0", "--results", "res",
                    "-q"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    (run_dir, s), = _summaries(tmp_path / "res").items()
    assert s["status"] == "failed"
    assert s["reason"].startswith("timeline incomplete: 0 of 1 events applied")
    assert s["events_applied"] == 0 and s["events_scheduled"] == 1
    assert_run_left_nothing(run_dir)
    assert state_empty(tmp_path / "state")


def test_sigkill_of_orchestrator_then_clean_repairs_the_record(tmp_path):
    env, _ = env_for(tmp_path)
    proc = subprocess.Popen([str(NETSENSE), "run", _write(tmp_path, "time_limit_s: 60"),
                             "--seed", "0", "--results", "res", "-q"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = _wait(lambda: next(iter((tmp_path / "res").glob("rel/*/workers/rank0.jsonl")),
                                     None)).parents[1]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "running"
    # The tables already tell the truth before anything is cleaned.
    runs, _ = tables.load_runs(tmp_path / "res")
    assert runs["status"].tolist() == ["failed"]
    assert runs["reason"].iloc[0] == f"orchestrator died (pid {proc.pid} not alive)"

    clean = subprocess.run([str(NETSENSE), "clean"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "records repaired: 1" in clean.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["reason"] == f"orchestrator died (pid {proc.pid} not alive)"
    assert_run_left_nothing(run_dir)
    assert state_empty(tmp_path / "state")


def test_sigint_at_a_run_boundary_leaves_only_final_records(tmp_path):
    """SIGINT the moment the first of two runs is final: exit 130 and every run folder has
    a final summary (no empty folder, nothing 'running')."""
    env, _ = env_for(tmp_path)
    proc = subprocess.Popen([str(NETSENSE), "run", _write(tmp_path, "steps: 3"), "--results",
                             "res", "-q"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: any(s.get("status") in ("ok", "failed")
                          for s in _summaries(tmp_path / "res").values()), every=0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    folders = [d for d in (tmp_path / "res" / "rel").iterdir() if d.is_dir()]
    summaries = _summaries(tmp_path / "res")
    assert set(folders) == set(summaries), "a run folder without summary.json"
    assert all(s["status"] in ("ok", "failed") for s in summaries.values()), summaries
    for d in folders:
        assert_run_left_nothing(d)
    assert state_empty(tmp_path / "state")


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_sigint_after_a_sweep_run_keeps_its_sweep_record(tmp_path, inherited):
    """``ignored``: the sweep starts with SIGINT ignored, as a background job of a
    non-interactive shell does (CI runners, ``nohup``); the signal still interrupts it."""
    sweep = tmp_path / "sw.yaml"
    sweep.write_text(f"""name: sw
scenario: {_write(tmp_path, "steps: 3")}
methods: [allreduce]
seeds: [0, 1, 2, 3, 4]
""")
    # Five seeds: the signal sent on the first "ok" lands with runs still to go, between two
    # of them as often as inside one -- the case "ignored" is about (testbed/cli/app.py,
    # _sigint_interrupts); the runs after it never start, so they cost nothing.
    env, _ = env_for(tmp_path)
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if inherited == "ignored" else None
    proc = subprocess.Popen([str(NETSENSE), "sweep", str(sweep), "--results", "res"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ignore)
    try:
        _wait(lambda: any(s.get("status") == "ok"
                          for s in _summaries(tmp_path / "res").values()), every=0.005)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    summaries = _summaries(tmp_path / "res")
    assert summaries
    for d, s in summaries.items():
        assert s["status"] in ("ok", "failed")
        assert (d / "sweep.json").is_file(), f"{d} has no sweep.json"
        assert_run_left_nothing(d)
    dry = run_cli(["sweep", str(sweep), "--results", "res", "--dry-run", "--verbose"], tmp_path)
    ok = sum(1 for s in summaries.values() if s["status"] == "ok")
    assert dry.stdout.count("skip (ok)") == ok
    assert state_empty(tmp_path / "state")


def test_killed_doctor_probe_is_seen_and_removed_by_clean(tmp_path):
    """A process killed inside a doctor probe (the interface exists) leaves a registered
    prefix; `netsense clean` removes the interface and the registration."""
    env, _ = env_for(tmp_path)
    code = ("import subprocess, time\n"
            "from testbed.emulation import kernel\n"
            "with kernel.ProbePrefix() as p:\n"
            "    p.note(p.prefix + 'b')\n"
            "    subprocess.run(['ip', 'link', 'add', p.prefix + 'b', 'type', 'bridge'],"
            " check=True)\n"
            "    print(p.prefix, flush=True)\n"
            "    time.sleep(600)\n")
    proc = subprocess.Popen([str(Path(NETSENSE).parent / "python"), "-c", code], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        prefix = proc.stdout.readline().strip()
        assert prefix.startswith("nst")
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert leftovers.interfaces_with_prefix(prefix) == [prefix + "b"]
    assert leftovers.find(tmp_path / "state", prefix=prefix)["registries"]
    clean = subprocess.run([str(NETSENSE), "clean"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout
    assert prefix + "b" in clean.stdout
    assert leftovers.interfaces_with_prefix(prefix) == []
    assert state_empty(tmp_path / "state")
