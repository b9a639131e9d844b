"""An own job end to end on a real emulated network (issue 42): a user's script
(``tests/jobs/tiny_job.py``, not the built-in worker) started in every emulated host as
torchrun would, once per method, with the hook's records, the timeline and the network
truth; README section 4's ``examples/my_job.py`` under ``netsense run`` as under torchrun;
and every failure class of an own job ending with a true record naming its cause, within
seconds of its deadline, with nothing left running.

Run as root under the heavy lock on a shared machine (``flock /tmp/netsense-heavy.lock``);
each run is 2 workers for a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.analysis import loading
from testbed.config.scenario import load_scenario
from testbed.emulation import leftovers
from testbed.orchestration.run import run_scenario
from tests.netsenseml.readme import readme_snippet
from tests.orchestration.run_checks import assert_nothing_left, run_dirs

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "jobs" / "tiny_job.py"
NETSENSE = Path(sys.executable).parent / "netsense"

pytestmark = pytest.mark.emulation


def _scenario(tmp_path: Path, args: list[str], timeout_s: float = 60, **more) -> Path:
    data = {"name": "own-job", "topology": {"kind": "star", "n_workers": 2, "n_cross": 1,
                                            "rate_mbit": 50},
            "workload": {"command": ["python", str(JOB), *args], "target_accuracy": 0.5},
            "methods": ["fp16", "topk:0.1"], "timeout_s": timeout_s, **more}
    path = tmp_path / "own-job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _netsense_run(scenario: Path, root: Path, *more: str, timeout: float = 400) -> list[Path]:
    """``netsense run`` of ``scenario`` into ``root``, quiet, which must exit 0: its run folders."""
    p = subprocess.run([str(NETSENSE), "run", str(scenario), "-r", str(root), "-q", *more],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return run_dirs(root)


def test_an_own_job_runs_once_per_method_with_records_timeline_and_truth(tmp_path: Path) -> None:
    path = _scenario(tmp_path, ["--steps", "400"], timeline=[  # ~2 s of training
        {"at_s": 0.3, "kind": "set_rate", "link": "w1", "rate_mbit": 20}])
    root = tmp_path / "results"
    dirs = _netsense_run(path, root)
    assert len(dirs) == 2
    for d in dirs:
        s = json.loads((d / "summary.json").read_text())
        method = s["method"]
        assert s["status"] == "ok", s
        assert s["steps"] == 400 and s["throughput_samples_per_s"] > 0
        assert s["final_accuracy"] is not None and s["bytes_sent_total"] > 0
        assert s["events_applied"] == s["events_scheduled"] == 1
        assert s["network"]["bytes"]["status"] == "ok", s["network"]["bytes"]
        assert s["launcher"] == "fork" and "warnings" not in s  # forked from the zygote
        steps = pd.read_csv(d / "steps.csv")
        assert set(steps["rank"]) == {0, 1}
        assert set(steps["level"].dropna()) == {"fp16" if method == "fp16" else "topk"}
        events = pd.read_csv(d / "events.csv")
        # the timeline's origin is the job's first step: the rate cut lands inside training
        assert steps["t"].min() <= events["t_applied"][0] <= steps["t"].max()
        config = json.loads((d / "config.json").read_text())
        assert config["worker_argv"][:2] == [sys.executable, str(JOB)]
        log = (d / "workers" / "rank0.log").read_text()
        assert f"rank 0: method {method}" in log  # the run's method reached register(model)
        assert "fresh interpreter" not in log  # it ran in the fork (workloads.job_runner)
        assert_nothing_left(d)
    for cmd in (["report", "-r", str(root)], ["plot", "-r", str(root)],
                ["compare", str(root), "-o", str(tmp_path / "compare")]):
        q = subprocess.run([str(NETSENSE), *cmd], capture_output=True, text=True, timeout=300)
        assert q.returncode == 0, (cmd, q.stdout, q.stderr)


@pytest.fixture(scope="module")
def unreported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Path]]:
    """One `netsense run` (both methods) of a job that never calls hooks.report, the
    scenario stating its samples_per_step, every rank writing a config.json into its working
    directory: (the scenario's folder, the results root, the run folders). Shared by the two
    tests below (what the tables make of a job that reports nothing; where a rank's files
    go), which read it and change nothing."""
    tmp = tmp_path_factory.mktemp("unreported")
    path = _scenario(tmp, ["--steps", "40", "--no-report", "--write", "config.json"])
    data = yaml.safe_load(path.read_text())
    data["workload"]["samples_per_step"] = 48
    path.write_text(yaml.safe_dump(data))
    root = tmp / "results"
    return tmp, root, _netsense_run(path, root)


def test_a_job_that_reports_nothing_gets_the_scenarios_samples_and_no_accuracy_cell(
        unreported: tuple[Path, Path, list[Path]], tmp_path: Path) -> None:
    """Issue 50: an own job without hooks.report under `netsense run`: samples/s from the
    scenario's samples_per_step (NETSENSE_SAMPLES), steps/s, and "not reported by the job"
    where its accuracy would be (the tables' own checks: tests/analysis/test_own_job_tables)."""
    _, root, dirs = unreported
    assert len(dirs) == 2
    for d in dirs:
        s = json.loads((d / "summary.json").read_text())
        assert s["status"] == "ok" and s["samples_total"] == 40 * 48 * 2, s
        assert s["samples_from"] == "scenario" and s["accuracy_reported"] is False
        assert s["throughput_samples_per_s"] > 0 and s["steps_per_s"] > 0
        assert_nothing_left(d)
    q = subprocess.run([str(NETSENSE), "compare", str(root), "-o", str(tmp_path / "cmp")],
                       capture_output=True, text=True, timeout=300, env={**os.environ,
                                                                         "COLUMNS": "200"})
    assert q.returncode == 0, q.stdout + q.stderr
    assert "not reported" in q.stdout and "0/1" not in q.stdout


def test_readme_section_4s_job_runs_under_netsense_run(tmp_path: Path) -> None:
    assert (REPO / "examples" / "my_job.py").read_text() == readme_snippet()
    root = tmp_path / "results"
    (d,) = _netsense_run(REPO / "examples" / "my_job.yaml", root, "-m", "netsenseml", timeout=300)
    s = json.loads((d / "summary.json").read_text())
    assert s["status"] == "ok" and s["steps"] == 30, s
    assert s["time_to_accuracy_s"] is not None  # hooks.report(accuracy=...) and the target
    assert "step 20:" in (d / "workers" / "rank0.log").read_text()
    assert_nothing_left(d)


#: failure -> (words the reason must hold, seconds the run may take beyond its deadline)
FAILURES = {
    "crash": ("RuntimeError: the job's own bug at step 10", None),
    "hang-before-init": ("ranks 0, 1: before init_process_group", 10),
    "hang-after-init": ("past init_process_group (connected to its peers), but "
                        "hooks.register(model) not reached", 10),
    "hang-late": ("registered the hook; its last finished step is", 10),
    # where each hung rank is: its Python stack at the deadline (testbed.orchestration.stacks)
    "hang-collective": ("in all_reduce (torch/distributed/distributed_c10d.py:", 10),
    "hang-destroy": ("via destroy_process_group from main (tiny_job.py:", 10),
    "no-register": ("without ever calling hooks.register", None),
    "child": ("left 2 processes running after its ranks exited (killed)", None),
}


@pytest.mark.parametrize("fail", [  # a hang is waited out to the deadline: slow
    pytest.param(f, marks=pytest.mark.slow) if f.startswith("hang") else f for f in FAILURES])
def test_each_failure_of_an_own_job_ends_with_its_cause_and_nothing_left(
        tmp_path: Path, fail: str) -> None:
    # the job is forked from the pre-imported zygote: it starts in < 1 s, and every hang
    # point (before init, after it, hang-late's step 10 of 20 of a tiny MLP, the last
    # collective, the destroy) is reached 0.1-0.15 s after the fork (measured on the
    # 2-core host, under the heavy lock). A hang is waited out to the deadline, so no
    # longer than that: 3 s, 20x that margin. The others end on their own (6 s: their
    # bound below as before)
    words, late = FAILURES[fail]
    deadline = 3.0 if late is not None else 6.0
    scn = load_scenario(_scenario(tmp_path, ["--steps", "20", "--fail", fail], deadline))
    t0 = time.monotonic()
    out = run_scenario(scn, "fp16", 0, tmp_path / "run", progress=False)
    took = time.monotonic() - t0
    s = out.summary
    assert out.status == "failed", s
    assert words in s["reason"], s["reason"]
    if late is not None:  # a hang ends at the deadline, plus teardown
        assert s["reason"].startswith(f"timeout: workers still running after {deadline:g} s")
        assert took < deadline + 5 + late, took  # + start-up before the deadline's clock
    else:
        assert took < deadline + 10, took
    if fail.startswith("hang-") and fail not in ("hang-before-init",):
        # the rank waiting in the job's own code is named by its frame, its stack kept
        assert "in main (tiny_job.py:" in s["reason"], s["reason"]
        assert "stacks in workers/rank" in s["reason"], s["reason"]
        stack = (out.run_dir / "workers" / "rank1.stack").read_text()
        assert "tiny_job.py" in stack and "most recent call first" in stack, stack
    if fail == "child":
        left = s["left_behind"]
        assert [e["rank"] for e in left] == [0, 1] and "time.sleep(3600)" in left[0]["command"]
        assert all(leftovers.proc_starttime(e["pid"]) is None for e in left)
    assert_nothing_left(out.run_dir)


@pytest.mark.parametrize("end", ["destroy", "none", "shutdown", "clean_exit"])
def test_a_job_ends_cleanly_however_it_leaves(tmp_path: Path, end: str) -> None:
    """dist.destroy_process_group() at the end (the race netsenseml.lifecycle documents),
    no destroy at all (the interpreter's exit race), hooks.shutdown() and hooks.clean_exit():
    each run is ok, every rank exits 0 and nothing waits for a watchdog."""
    scn = load_scenario(_scenario(tmp_path, ["--steps", "40", "--end", end], 60))
    t0 = time.monotonic()
    out = run_scenario(scn, "fp16", 0, tmp_path / "run", progress=False)
    took = time.monotonic() - t0
    s = out.summary
    assert out.status == "ok", s
    assert s["worker_exit_codes"] == [0, 0] and "exit_anomalies" not in s, s
    assert s["steps"] == 40, s
    assert took < 30, took  # a destroy that hung would wait out lifecycle.DESTROY_TIMEOUT_S
    for rank in (0, 1):
        log = (out.run_dir / "workers" / f"rank{rank}.log").read_text()
        assert f"rank {rank}: done 40 steps" in log and "Timeout" not in log, log
    assert not list((out.run_dir / "workers").glob("*.stack"))  # nobody asked: none kept
    assert_nothing_left(out.run_dir)


def test_each_host_runs_in_its_own_folder_and_no_run_sees_anothers_files(
        unreported: tuple[Path, Path, list[Path]]) -> None:
    """Every rank writes the same relative path: each lands in its host's own working
    directory inside the run folder (hosts/<host>/), and the next run (the next method)
    starts without it; the scenario's folder gets nothing. The file is a config.json, as
    many jobs save one: the analysis does not take a host's folder for a run folder."""
    scenario_dir, root, dirs = unreported
    assert len(dirs) == 2
    for d in dirs:
        written = sorted((d / "hosts").glob("*/config.json"))
        assert len(written) == 2, written  # one per host, no collision
        texts = [f.read_text() for f in written]
        assert sorted(t.split(" cwd ")[0] for t in texts) == ["rank 0", "rank 1"], texts
        for f, t in zip(written, texts, strict=True):
            assert t.strip().endswith(str(f.parent)), (f, t)  # its working directory
        for rank in (0, 1):
            log = (d / "workers" / f"rank{rank}.log").read_text()
            assert f"rank {rank}: found config.json: False" in log, log  # nothing inherited
    assert not (scenario_dir / "config.json").exists() and not (REPO / "config.json").exists()
    loaded = loading.load_all(root)
    assert len(loaded.runs) == 2 and not loaded.excluded, loaded.excluded


def test_a_job_started_as_a_fresh_interpreter_ends_and_hangs_the_same(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """Without the zygote (NETSENSE_ZYGOTE=0) the job runs through workloads/job_runner.py in a
    fresh interpreter: dist.destroy_process_group() at its end is as safe, and a hung rank
    is named by its frame as in a forked job."""
    monkeypatch.setenv("NETSENSE_ZYGOTE", "0")
    scn = load_scenario(_scenario(tmp_path, ["--steps", "20", "--end", "destroy"], 60))
    out = run_scenario(scn, "fp16", 0, tmp_path / "ok", progress=False)
    s = out.summary
    assert out.status == "ok" and s["launcher"] == "process", s
    assert s["worker_exit_codes"] == [0, 0] and "exit_anomalies" not in s, s
    deadline = 15.0  # a fresh interpreter imports torch first
    scn = load_scenario(_scenario(tmp_path, ["--steps", "20", "--fail", "hang-late"], deadline))
    out = run_scenario(scn, "fp16", 0, tmp_path / "hang", progress=False)
    reason = out.summary["reason"]
    assert out.status == "failed" and reason.startswith("timeout: workers still running"), reason
    assert "rank 1: registered the hook; its last finished step is" in reason, reason
    assert "in main (tiny_job.py:" in reason, reason  # rank 1, waiting in the job's own code
    assert "stacks in workers/rank{0,1}.stack" in reason, reason
    assert_nothing_left(out.run_dir)
