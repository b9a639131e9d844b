"""The hindsight-ideal schedule on a tiny REAL sweep (testbed/sweeps/tiny-ideal.yaml: a
1+1 dumbbell whose bottleneck drops 200 -> 10 -> 200 Mbit/s, allreduce / top-k 0.01 /
NetSenseML, 2 seeds, Mininet + gloo), checked against a recomputation here from the raw
steps.csv and events.csv with the csv module (independently of pandas, tables.py and
ideal.py): the phases, each level's steps per second in each phase, the levels' steps to
target, the ideal TTA per seed, and the ideal row of the speedup table (its TTA speedup =
mean NetSenseML TTA against the mean ideal TTA). Also: a combined folder (this sweep plus a
stray single run without NetSenseML) names what the speedup table leaves out.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.analysis import ideal, report, tables
from testbed.config import faithful
from tests.cli.apps import analysis_app

pytestmark = [pytest.mark.emulation, pytest.mark.slow]  # slow: a real sweep of its own
LADDER = {"allreduce": "none", "topk:0.01": "topk:0.01"}


#: tiny-ideal.yaml's target_accuracy (the runs must still be training at the drop)
TARGET = 0.93


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep, run as if this machine's faithful range ended at 100 Mbit/s (its idle
    phases run at 200), so every run must carry the warning."""
    root = tmp_path_factory.mktemp("ideal")
    old = os.environ.get(faithful.ENV)
    os.environ[faithful.ENV] = "100"
    try:
        res = CliRunner().invoke(analysis_app(), ["sweep", "tiny-ideal", "--results", str(root)])
    finally:
        if old is None:
            os.environ.pop(faithful.ENV, None)
        else:
            os.environ[faithful.ENV] = old
    assert res.exit_code == 0, res.output
    return root


def test_runs_above_the_faithful_range_say_so(swept: Path) -> None:
    summaries = [json.loads(p.read_text()) for p in swept.rglob("summary.json")]
    assert len(summaries) == 6
    assert all(s["status"] == "ok" for s in summaries), [s.get("reason") for s in summaries]
    for s in summaries:
        # stopped at the target: the events due later are not applied, and that is said
        if s["events_applied"] < s["events_scheduled"]:
            assert s["timeline_note"].startswith("stopped at the target after"), s
        assert s["time_to_accuracy_s"] is not None
        assert any("200 Mbit/s is above the emulation's faithful range (100 Mbit/s"
                   in w for w in s.get("warnings", [])), s.get("warnings")
    html = report.build_report(swept, log=lambda _m: None).read_text()
    assert "Runs with warnings" in html and html.count("faithful range (100 Mbit/s") >= 6


def _rank0(run: Path) -> list[dict[str, str]]:
    with open(run / "steps.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["rank"] == "0"]
    return rows


def _recompute(run: Path) -> tuple[list[float], list[float], float]:
    """(phase starts on the training clock, steps/s per phase, steps to target) of one run."""
    rows = _rank0(run)
    steps = [r for r in rows if r["samples"] not in ("", None)]
    t = sorted(float(r["t_worker"]) for r in steps)
    offset = statistics.median(float(r["t"]) - float(r["t_worker"]) for r in steps)
    with open(run / "events.csv") as fh:
        applied = sorted(float(e["t_applied"]) - offset for e in csv.DictReader(fh)
                         if e["kind"] == "set_rate" and e["t_applied"] not in ("", None))
    bounds = [0.0]
    for a in applied:
        if 0 < a < t[-1] and a > bounds[-1] + ideal.MERGE_S:
            bounds.append(a)
    rates = []
    for k, a in enumerate(bounds):
        b = min(bounds[k + 1] if k + 1 < len(bounds) else t[-1], t[-1])
        rates.append(sum(1 for x in t if a < x <= b) / (b - a))
    target = TARGET
    hit = [int(r["step"]) for r in rows if r["accuracy"] not in ("", None)
           and float(r["accuracy"]) >= target]
    return bounds, rates, (min(hit) if hit else math.nan)


def _walk(bounds: list[float], per: dict[str, tuple], n: dict[str, float]) -> float:
    """Progress phase by phase at the best level's steps/s / steps to target; the time it
    reaches 1 (NaN when the measured phases end first)."""
    progress = 0.0
    for k, a in enumerate(bounds):
        speeds = [p[1][k] / n[lv] for lv, p in per.items()
                  if k < len(p[1]) and not math.isnan(p[1][k])]
        if not speeds:
            return math.nan
        speed = max(speeds)
        length = bounds[k + 1] - a if k + 1 < len(bounds) else math.inf
        if progress + speed * length >= 1:
            return a + (1 - progress) / speed
        progress += speed * length
    return math.nan


def _folders(root: Path) -> dict[tuple[str, int], Path]:
    out = {}
    for p in root.rglob("summary.json"):
        name = p.parent.name  # <method>-s<seed>
        method, _, seed = name.rpartition("-s")
        out[(method.replace("topk-", "topk:"), int(seed))] = p.parent
    return out


def test_ideal_matches_recomputation_from_raw_files(swept: Path) -> None:
    runs, steps = tables.load_runs(swept)
    assert (runs["status"] == "ok").all(), runs[["run", "status", "reason"]]
    got = ideal.ideal_table(swept, runs, steps).set_index("seed")
    folders = _folders(swept)
    # steps to target: mean over seeds of each fixed level's own runs (no table named)
    n = {}
    for method, level in LADDER.items():
        hits = [_recompute(folders[(method, s)])[2] for s in (0, 1)]
        assert all(not math.isnan(h) for h in hits), f"{method} did not reach the target"
        n[level] = sum(hits) / len(hits)
    want = {}
    for seed in (0, 1):
        per = {LADDER[m]: _recompute(folders[(m, seed)]) for m in LADDER}
        bounds = max((p[0] for p in per.values()), key=len)
        assert len(bounds) == 3, f"expected idle / drop / idle phases, got {bounds}"
        tta = _walk(bounds, per, n)
        want[seed] = tta
        assert got.loc[seed, "ideal_tta_s"] == pytest.approx(tta, rel=1e-6)
        assert got.loc[seed, "steps_source"].startswith("steps to target")
        assert len(got.loc[seed, "schedule"].split()) == got.loc[seed, "phases_used"]
    # the ideal row: mean ideal TTA vs mean NetSenseML TTA (tables' own TTA definition)
    sp = tables.speedup_table(runs, ideal.ideal_table(swept, runs, steps))
    row = sp[sp["baseline"] == tables.IDEAL].iloc[0]
    ns = []
    for seed in (0, 1):
        rows = _rank0(folders[("netsenseml", seed)])
        ns.append(min(float(r["t_worker"]) for r in rows if r["accuracy"] not in ("", None)
                      and float(r["accuracy"]) >= TARGET))
    assert row["baseline_tta_s"] == pytest.approx(statistics.fmean(want.values()), rel=1e-6)
    assert row["tta_speedup"] == pytest.approx(
        statistics.fmean(want.values()) / statistics.fmean(ns), rel=1e-6)
    assert row["tta_speedup_lo"] <= row["tta_speedup"] <= row["tta_speedup_hi"]
    # each fixed level alone is one of the schedules the ideal chooses from, so the ideal
    # reaches the target no later than any of them
    for seed in (0, 1):
        per = {LADDER[m]: _recompute(folders[(m, seed)]) for m in LADDER}
        bounds = max((p[0] for p in per.values()), key=len)
        for lv in per:
            alone = _walk(bounds, {lv: per[lv]}, n)
            assert math.isnan(alone) or got.loc[seed, "ideal_tta_s"] <= alone + 1e-9


def test_combined_folder_names_what_it_leaves_out(swept: Path, tmp_path: Path) -> None:
    combined = tmp_path / "combined"
    shutil.copytree(swept, combined / "sweep")
    # a stray single run without NetSenseML: one fixed run of the sweep, as if run alone
    one = _folders(swept)[("allreduce", 0)]
    stray = combined / "tiny-drop-alone" / one.name
    shutil.copytree(one, stray)
    (stray / "sweep.json").unlink()
    runs, _ = tables.load_runs(combined)
    sp = tables.speedup_table(runs)
    left = sp.attrs["left_out"]
    assert any("tiny-drop" in k and "no NetSenseML run" in v for k, v in left.items()), left
    assert set(sp["experiment"]) == {"tiny-ideal/drop"}
    head = report.headline(sp, runs)
    assert set(head["experiment"]) == set(tables.ok_runs(runs)["experiment"])
    assert head.loc[head["experiment"] != "tiny-ideal/drop", "note"].str.contains(
        "no NetSenseML run").all()
