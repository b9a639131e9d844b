"""One sweep process per results folder (a lock that dies with its
holder), and grid values that would share a run folder are refused at load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.invoke import netsense
from tests.reliability.helpers import one_line_error, run_cli

SCENARIO = {"name": "t", "topology": {"kind": "star", "n_workers": 2, "n_cross": 0,
                                      "rate_mbit": 50},
            "workload": {"model": "mlp", "dataset": "digits", "batch_size": 8, "steps": 3},
            "methods": ["allreduce"]}


def _sweep(tmp_path, grid: dict | None = None) -> str:
    p = tmp_path / "sw.yaml"
    p.write_text(json.dumps({"name": "sw", "scenario": SCENARIO, "methods": ["allreduce"],
                             "grid": grid or {}}))
    return str(p)


def _finished_run(results) -> None:
    """The sweep's only run, already ok: a sweep over it runs nothing (skips it)."""
    d = results / "sw" / "main" / "base" / "allreduce-s0"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"status": "ok"}))


def test_second_sweep_refuses_while_first_holds_the_lock_and_not_after_it_died(tmp_path):
    results = tmp_path / "res"
    _finished_run(results)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path\n"
         "from testbed.orchestration.sweep import SweepLock\n"
         "lock = SweepLock(Path(sys.argv[1])); lock.acquire(); print('held', flush=True)\n"
         "time.sleep(600)\n", str(results / "sw")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t = time.monotonic()
        proc = run_cli(["sweep", _sweep(tmp_path), "--results", str(results)], tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        one_line_error(proc.stderr, "in use by another sweep", f"pid {holder.pid}")
        assert time.monotonic() - t < 60
        assert not (results / "sw" / "main" / "base" / "allreduce-s0" / "sweep.json").exists()
        os.kill(holder.pid, signal.SIGKILL)  # the lock dies with its holder
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
    proc = run_cli(["sweep", _sweep(tmp_path), "--results", str(results)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 ok, 0 failed, 1 skipped" in proc.stdout
    # a finished run found without its sweep record gets it when skipped
    meta = json.loads((results / "sw/main/base/allreduce-s0/sweep.json").read_text())
    assert meta["sweep"] == "sw" and meta["seed"] == 0


@pytest.mark.parametrize("values, shown", [
    ([20, 20.0], "rate_mbit=20"), (["a", "a "], "label='a '"), ([1, "1"], "rate_mbit='1'"),
])
def test_grid_values_sharing_a_folder_are_refused(tmp_path, monkeypatch, values, shown):
    path = "topology.rate_mbit" if shown.startswith("rate") else "description"
    key = path.rsplit(".", 1)[-1]
    grid = {path: values}
    if key == "description":
        shown = shown.replace("label", "description")
    res = netsense(["sweep", _sweep(tmp_path, grid), "--results", str(tmp_path / "res"),
                    "--dry-run"], tmp_path, monkeypatch)
    assert res.exit_code == 2, res.output
    one_line_error(res.stderr, "experiments.main.grid:", shown, "map to the same run folder")
    assert not (tmp_path / "res").exists()


def test_two_runs_in_one_second_never_share_a_folder(tmp_path):
    """`netsense run` creates its run folder exclusively: the same run id twice (same
    second, method, seed) gives two folders."""
    from concurrent.futures import ThreadPoolExecutor

    from testbed.cli.app import _unique

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: _unique(tmp_path / "t" / "20261203-000000-x-s0"),
                            range(16)))
    assert len(set(got)) == 16 and all(p.is_dir() for p in got)


def test_a_live_runs_folder_is_never_taken_over(tmp_path):
    """A second writer finding a live (running, orchestrator alive) run folder refuses
    instead of deleting it as an 'earlier failed attempt'."""
    from testbed.orchestration.rundir import RunFolder, orchestrator_entry

    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"status": "running",
                                                "orchestrator": orchestrator_entry()}))
    with pytest.raises(ValueError, match=f"being written by a live run \\(pid {os.getpid()}"):
        RunFolder(d).prepare()
    assert (d / "summary.json").exists()
