"""`netsense plot` / `report` on results with damaged run folders name each damaged run, leave it out visibly (a warning line each, the figures' caption and the
report say how many and why), never crash, and still draw from the intact runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.analysis import loading, tables
from tests.cli.invoke import netsense
from tests.reliability.run_folders import good_run

DEAD_PID = 2**22 + 12345  # above pid_max's usual range: never alive


def _results(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "results"
    runs = {(rate, m): good_run(root, rate, m) for rate in (10, 50)
            for m in ("allreduce", "netsenseml")}
    damaged = {}
    for rate, m, how in ((10, "topk-0.1", "truncated"), (50, "topk-0.1", "binary"),
                         (10, "fp16", "columnless"), (50, "fp16", "missing"),
                         (10, "int8", "config")):
        d = good_run(root, rate, m.split("-")[0])
        d = d.rename(d.with_name(f"{m}-s0"))
        if how == "truncated":
            (d / "summary.json").write_text('{"status": "ok", "meth')
            damaged[str(d.relative_to(root))] = "summary.json is not valid JSON (truncated?)"
        elif how == "binary":
            (d / "steps.csv").write_bytes(os.urandom(2000) + b"\0")
            damaged[str(d.relative_to(root))] = "steps.csv"
        elif how == "columnless":
            (d / "steps.csv").write_text("hello\nworld\n")
            damaged[str(d.relative_to(root))] = "steps.csv lacks column(s) rank, t, samples"
        elif how == "missing":
            (d / "steps.csv").unlink()
            damaged[str(d.relative_to(root))] = "steps.csv missing (status ok)"
        else:
            (d / "config.json").write_text("[1, 2]")
            damaged[str(d.relative_to(root))] = "config.json is not a JSON object"
    # a run whose orchestrator died: a true "failed", not damaged and not "running"
    dead = good_run(root, 50, "dgc")
    (dead / "summary.json").write_text(json.dumps({
        "status": "running", "method": "dgc", "orchestrator": {
            "pid": DEAD_PID, "starttime": 1, "host": os.uname().nodename}}))
    assert runs
    return root, damaged


def test_tables_exclude_damaged_runs_by_name(tmp_path):
    root, damaged = _results(tmp_path)
    runs, _ = tables.load_runs(root)
    excluded = {e.run: e.reason for e in loading.excluded_of(runs)}
    assert set(excluded) == set(damaged)
    for run, needle in damaged.items():
        assert excluded[run].startswith(needle), (run, excluded[run])
    assert len(runs) == 5 and (runs["status"] == "ok").sum() == 4
    dead = runs[runs["method"] == "dgc"].iloc[0]
    assert dead["status"] == "failed"
    assert dead["reason"] == f"orchestrator died (pid {DEAD_PID} not alive)"


def test_plot_and_report_name_exclusions_and_still_draw(tmp_path, monkeypatch):
    root, damaged = _results(tmp_path)
    res = netsense(["plot", str(root)], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    said = res.stdout + res.stderr  # notes go to stderr, the written figures to stdout
    for run in damaged:
        assert sum(f"excluded damaged run {run}:" in ln for ln in said.splitlines()) == 1
    assert "not plotted: sw/rate/rate_mbit=50/dgc-s0 is failed (orchestrator died" in \
        said.replace("\n", " ")
    assert (root / "figures" / "throughput_vs_rate.png").is_file()
    assert len(open(root / "figures" / "runs.csv").read().splitlines()) == 1 + 5

    res = netsense(["report", str(root)], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    page = (root / "report.html").read_text()
    assert "5 damaged runs excluded" in page and "Excluded runs (damaged folders)" in page
    for run in damaged:
        assert run in page


def test_only_damaged_runs_is_bad_input_not_silence(tmp_path, monkeypatch):
    root = tmp_path / "results"
    d = good_run(root, 10, "allreduce")
    (d / "summary.json").write_text("")
    res = netsense(["plot", str(root)], tmp_path, monkeypatch)
    assert res.exit_code == 2
    assert "excluded damaged run sw/rate/rate_mbit=10/allreduce-s0" in res.stdout + res.stderr
    assert "no loadable run folders" in res.stderr
