"""Sweeps through a real local Ray cluster (head + one worker node, both on this machine,
each declaring ``netsense_host: 1``; tests/orchestration/raycluster.py), against the same
sweep run by the local executor:

- the ``tiny`` sweep through Ray gives the same results tree (same files per run folder),
  the same sweep.json, summary/config keys, steps.csv columns and tables as a local run
  (the session's tiny sweep, ``tiny_sweep`` in tests/conftest.py);
- the Ray worker process running a run is SIGKILLed mid-run: with ``--retries 0`` the run is
  marked failed with the reason, and nothing is left behind (no interface with the run's
  prefix, none of its processes, no staging folder); a second sweep resumes it to ok; with
  ``--retries 1`` the same kill is absorbed by a retry and the run ends ok.

~80 s on the idle 2-core machine (cluster start ~10 s, Ray tiny ~23 s, kill cases ~45 s;
the local tiny sweep, ~20 s, is the session's). Requires Ray (``pip install -e '.[ray]'``): skipped without it.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.analysis import tables
from testbed.config.sweep import expand, load_sweep

pytest.importorskip("ray")
from tests.orchestration.raycluster import LocalRayCluster  # noqa: E402

pytestmark = [pytest.mark.emulation, pytest.mark.slow]

KILL_SWEEP = """\
name: killme
methods: [allreduce]
seeds: [0]
scenario:
  name: kill-dumbbell
  topology: {kind: dumbbell, n_left: 1, n_right: 1, n_cross: 0, bottleneck_mbit: 100,
             access_mbit: 1000, queue_pkts: 100}
  workload: {model: mlp, dataset: digits, batch_size: 32, time_limit_s: 3, eval_every: 10,
             args: {width: 64}}
  methods: [allreduce]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    c = LocalRayCluster(tmp_path_factory.mktemp("staging"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
    assert c.pids() == [], "processes of the test's Ray cluster survived its stop"


def _sweep(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "sweep", *args],
                          capture_output=True, text=True, env=env, timeout=240, check=False)


def _tree(root: Path) -> dict[str, list[str]]:
    """Run folder (relative) -> its files (relative), ignoring the workers' own logs' names."""
    out = {}
    for s in root.rglob("summary.json"):
        d = s.parent
        out[str(d.relative_to(root))] = sorted(str(p.relative_to(d)) for p in d.rglob("*")
                                               if p.is_file())
    return out


def _columns(p: Path) -> list[str]:
    with open(p, newline="") as fh:
        return next(csv.reader(fh))


def test_tiny_sweep_on_ray_matches_local(cluster: LocalRayCluster, tiny_sweep: Path,
                                        tmp_path: Path) -> None:
    # the local executor's tiny sweep: the session's (tests/conftest.py), every run ok
    local, viaray = tiny_sweep, tmp_path / "ray"
    n_runs = len(expand(load_sweep("tiny"), local))  # every run of the sweep, whatever it lists
    assert [json.loads(p.read_text())["status"] for p in local.rglob("summary.json")] == \
        ["ok"] * n_runs
    t0 = time.monotonic()
    res = _sweep(["tiny", "--results", str(viaray), "--executor", f"ray:{cluster.address}"],
                 env=cluster.env)
    t_ray = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{n_runs} ok, 0 failed, 0 skipped" in res.stdout, res.stdout
    print(f"tiny sweep: ray (2 nodes) {t_ray:.1f} s")

    tree_l, tree_r = _tree(local), _tree(viaray)
    assert len(tree_l) == n_runs and tree_l == tree_r
    for run in tree_l:
        a, b = local / run, viaray / run
        assert json.loads((a / "sweep.json").read_text()) == \
            json.loads((b / "sweep.json").read_text())
        for name in ("summary.json", "config.json"):
            ja, jb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
            # but warnings: what the host did beside a run (hostload: other work kept the
            # cores busy, e.g. the other node's run under Ray), not what the executor wrote
            assert sorted(set(ja) - {"warnings"}) == sorted(set(jb) - {"warnings"}), name
        assert json.loads((b / "summary.json").read_text())["status"] == "ok"
        assert _columns(a / "steps.csv") == _columns(b / "steps.csv")
        assert _columns(a / "events.csv") == _columns(b / "events.csv")
    # nothing but run folders in the tree: no staging or half-installed folder
    assert not [p for p in viaray.rglob(".*") if p.name != ".lock"], list(viaray.rglob(".*"))
    assert not list(cluster.staging.iterdir())

    runs_l, _ = tables.load_runs(local)
    runs_r, _ = tables.load_runs(viaray)
    assert list(runs_l.columns) == list(runs_r.columns)
    key = ["run", "experiment", "kind", "method", "seed", "status", "rate_mbit"]
    assert runs_l[key].sort_values("run").values.tolist() == \
        runs_r[key].sort_values("run").values.tolist()
    thr_l, thr_r = tables.throughput_table(runs_l), tables.throughput_table(runs_r)
    assert list(thr_l.columns) == list(thr_r.columns) and len(thr_l) == len(thr_r) == n_runs


def _links() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True)
    return {line.split()[0].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _ray_processes() -> list[str]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:
            continue
        if "ray::" in cmd or "staged" in cmd:
            out.append(f"{p.name} {cmd}")
    return out


def _kill_task_when_training(staging: Path, proc: subprocess.Popen,
                             timeout_s: float = 90) -> dict:
    """SIGKILL the Ray worker process of the first run once its workers train.

    Returns what the run had started (prefix, pids) so that the test can check they are gone.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        for task in staging.glob("run-*/task.json"):
            pids = next(task.parent.glob("*/pids.json"), None)
            info = json.loads(pids.read_text()) if pids else {}
            steps = list(task.parent.glob("*/workers/rank0.jsonl"))
            if info.get("workers") and steps and steps[0].stat().st_size > 0:
                t = json.loads(task.read_text())
                # the Ray worker = the staged child's parent, as this PID namespace sees it
                ppid = _ppid(t["child_pid"])
                if ppid is None:
                    continue  # the child has gone already: look again
                if ppid != t["task_pid"]:
                    print("task pid mismatch:", t, ppid, _ray_processes())
                os.kill(ppid, signal.SIGKILL)
                return {**info, **t}
        time.sleep(0.2)
    raise AssertionError("the run never started training under Ray")


def _assert_nothing_left(started: dict, staging: Path, links_before: set[str]) -> None:
    deadline = time.monotonic() + 30
    pids = [started["child_pid"], *started["workers"], *started.get("iperf3", [])]
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "processes of the killed run survived"
    prefix = started["prefix"]
    assert prefix and not [n for n in _links() if n.startswith(prefix)]
    assert _links() - links_before == set()
    assert not list(staging.glob("run-*")), list(staging.rglob("*"))


def test_killed_worker_marks_run_failed_then_resumes(cluster: LocalRayCluster,
                                                     tmp_path: Path) -> None:
    sweep = tmp_path / "killme.yaml"
    sweep.write_text(KILL_SWEEP)
    results = tmp_path / "res"
    links_before = _links()
    args = [str(sweep), "--results", str(results), "--executor", f"ray:{cluster.address}"]
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "sweep", *args,
                             "--retries", "0"], env=cluster.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = _kill_task_when_training(cluster.staging, proc)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "0 ok, 1 failed" in out, out
    run_dir = results / "killme" / "main" / "base" / "allreduce-s0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("ray: ") and "retries" in summary["reason"]
    assert json.loads((run_dir / "sweep.json").read_text())["sweep"] == "killme"
    _assert_nothing_left(started, cluster.staging, links_before)

    res = _sweep(args, env=cluster.env)  # resume: the failed run is run again
    assert res.returncode == 0 and "1 ok, 0 failed, 0 skipped" in res.stdout, res.stdout
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    assert not [p for p in results.rglob(".*") if p.name != ".lock"]


def test_killed_worker_is_retried(cluster: LocalRayCluster, tmp_path: Path) -> None:
    sweep = tmp_path / "killme.yaml"
    sweep.write_text(KILL_SWEEP)
    results = tmp_path / "res"
    links_before = _links()
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "sweep", str(sweep),
                             "--results", str(results), "--executor",
                             f"ray:{cluster.address}", "--retries", "1"],
                            env=cluster.env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    started = _kill_task_when_training(cluster.staging, proc)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "1 ok, 0 failed" in out, out
    run_dir = results / "killme" / "main" / "base" / "allreduce-s0"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    assert json.loads((run_dir / "config.json").read_text())["prefix"] != started["prefix"]
    _assert_nothing_left(started, cluster.staging, links_before)
