"""A tiny REAL sweep (testbed/sweeps/tiny.yaml: 2 bottleneck rates x allreduce/top-k 0.01/
netsenseml, 1+1 dumbbell in Mininet, ~5 s of MLP training per run) through the real
orchestrator (once per session: ``tiny_sweep``, tests/conftest.py, which the figures' tests
read too), then:

- resume, on a copy: a second sweep skips all 6 finished runs; removing one summary re-runs only that one;
- tables: throughput / time-to-accuracy / final accuracy / speedup equal values recomputed
  here from the raw steps.csv with the csv module (independently of pandas and tables.py);
- the oracle row is the best fixed method recomputed here from the raw steps.csv;
- a target no run reaches (the same runs, their config.json asking 0.999): every TTA speedup
  is empty, not a number, and the tables say "not reached";
- a seed run twice counts once (the latest run);
- figures and report: written, non-empty, not blank.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from testbed.analysis import tables
from tests.cli.apps import analysis_app

pytestmark = pytest.mark.emulation



def _summaries(root: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime_ns for p in sorted(root.rglob("summary.json"))}


@pytest.fixture
def swept(tiny_sweep: Path) -> Path:
    """The session's tiny sweep (tests/conftest.py), shared with the figures' tests."""
    return tiny_sweep


def test_resume_skips_finished_and_reruns_only_missing(tiny_sweep: Path, tmp_path: Path) -> None:
    swept = tmp_path / "results"  # a copy: this test re-runs one run
    shutil.copytree(tiny_sweep, swept)
    before = _summaries(swept)
    assert len(before) == 6
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(swept)])
    assert res.exit_code == 0, res.output
    assert "0 ok, 0 failed, 6 skipped" in res.output
    assert _summaries(swept) == before  # nothing rewritten

    victim = sorted(before)[1]
    victim.unlink()  # as if the run had been killed before writing its summary
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(swept)])
    assert res.exit_code == 0, res.output
    assert "1 ok, 0 failed, 5 skipped" in res.output
    after = _summaries(swept)
    assert set(after) == set(before)
    changed = [p for p in after if after[p] != before.get(p)]
    assert changed == [victim]


def _raw(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "steps.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _f(v: str | None) -> float | None:
    return float(v) if v not in (None, "") else None


def _recompute(run_dir: Path, target: float) -> dict[str, float]:
    """The module docstring's definitions, written again from the raw CSV rows."""
    rows = _raw(run_dir)
    rank0 = [r for r in rows if r["rank"] == "0"]
    steps = sorted((r for r in rank0 if _f(r["samples"]) is not None), key=lambda r: float(r["t"]))
    # throughput leaves out DDP's start-up steps (marked `startup`) where two steps remain
    settled = [r for r in steps if not _f(r.get("startup"))]
    counted = settled if len(settled) >= 2 else steps
    thr = sum(float(r["samples"]) for r in counted[1:]) / (
        float(counted[-1]["t"]) - float(counted[0]["t"]))
    evals = sorted((r for r in rank0 if _f(r.get("accuracy")) is not None),
                   key=lambda r: float(r["t_worker"]))
    hit = [r for r in evals if float(r["accuracy"]) >= target]
    return {"throughput": thr, "tta": float(hit[0]["t_worker"]) if hit else math.nan,
            "final_accuracy": float(evals[-1]["accuracy"]), "steps": len(steps)}


def test_tables_equal_values_recomputed_from_steps_csv(swept: Path) -> None:
    runs, steps = tables.load_runs(swept)
    assert len(runs) == 6 and set(runs["status"]) == {"ok"}
    assert sorted(runs["rate_mbit"].unique()) == [20.0, 200.0]
    assert set(runs["method"]) == {"allreduce", "topk:0.01", "netsenseml"}
    mine: dict[tuple[float, str], dict[str, float]] = {}
    for _, r in runs.iterrows():
        exp = _recompute(swept / r["run"], target=0.5)
        mine[(r["rate_mbit"], r["method"])] = exp
        assert r["throughput"] == pytest.approx(exp["throughput"], rel=1e-9)
        # summary.json (the orchestrator's own computation, from wall clocks) agrees too
        assert r["throughput_summary"] == pytest.approx(exp["throughput"], rel=0.02)
        assert r["final_accuracy"] == pytest.approx(exp["final_accuracy"])
        if math.isnan(exp["tta"]):
            assert math.isnan(r["tta_s"]) and not r["reached_target"]
        else:
            assert r["tta_s"] == pytest.approx(exp["tta"]) and r["reached_target"]
        assert r["steps"] == exp["steps"]
        # TTA's clock starts at the first training step: its row ends one step_s after 0
        first = min((row for row in _raw(swept / r["run"])
                     if row["rank"] == "0" and _f(row["samples"]) is not None),
                    key=lambda row: float(row["t_worker"]))
        assert 0 <= float(first["t_worker"]) - float(first["step_s"]) < 0.05

    thr = tables.throughput_table(runs)
    assert len(thr) == 6
    for _, t in thr.iterrows():
        assert t["throughput_mean"] == pytest.approx(mine[(t["rate_mbit"], t["method"])]
                                                     ["throughput"], rel=1e-9)
        assert t["seeds"] == 1

    sp = tables.speedup_table(runs)
    assert len(sp) == 6 and set(sp["baseline"]) == {"allreduce", "topk:0.01", "oracle"}
    for _, s in sp[sp["baseline"] != "oracle"].iterrows():
        ns, base = mine[(s["rate_mbit"], "netsenseml")], mine[(s["rate_mbit"], s["baseline"])]
        assert s["throughput_speedup"] == pytest.approx(ns["throughput"] / base["throughput"])
        want = base["tta"] / ns["tta"]
        if math.isnan(want):
            assert math.isnan(s["tta_speedup"])
        else:
            assert s["tta_speedup"] == pytest.approx(want)


def test_oracle_is_the_best_fixed_method_recomputed_from_steps_csv(swept: Path) -> None:
    runs, _ = tables.load_runs(swept)
    sp = tables.speedup_table(runs)
    oracle = sp[sp["baseline"] == "oracle"]
    assert sorted(oracle["rate_mbit"]) == [20.0, 200.0]
    for _, o in oracle.iterrows():
        fixed = {}
        for _, r in runs[runs["rate_mbit"] == o["rate_mbit"]].iterrows():
            if r["method"] != "netsenseml":
                fixed[r["method"]] = _recompute(swept / r["run"], target=0.5)
        assert set(fixed) == {"allreduce", "topk:0.01"}
        best_thr = max(fixed, key=lambda m: fixed[m]["throughput"])
        ns = _recompute(swept / runs[(runs["rate_mbit"] == o["rate_mbit"])
                                     & (runs["method"] == "netsenseml")]["run"].iloc[0], 0.5)
        assert o["oracle_throughput_method"] == best_thr
        assert o["throughput_speedup"] == pytest.approx(
            ns["throughput"] / fixed[best_thr]["throughput"])
        reached = {m: v["tta"] for m, v in fixed.items() if not math.isnan(v["tta"])}
        if not reached:
            assert o["oracle_tta_method"] is None or pd.isna(o["oracle_tta_method"])
            assert math.isnan(o["tta_speedup"])
            continue
        best_tta = min(reached, key=reached.get)
        assert o["oracle_tta_method"] == best_tta
        if math.isnan(ns["tta"]):
            assert math.isnan(o["tta_speedup"])
        else:
            assert o["tta_speedup"] == pytest.approx(reached[best_tta] / ns["tta"])


def test_unreached_target_gives_empty_speedup_not_a_number(swept: Path, tmp_path: Path) -> None:
    """The same real runs, each config.json asking a target none of them reached."""
    copy = tmp_path / "results"
    shutil.copytree(swept, copy)
    for cfg in copy.rglob("config.json"):
        data = json.loads(cfg.read_text())
        data["scenario"]["workload"]["target_accuracy"] = 0.999
        cfg.write_text(json.dumps(data))
    runs, _ = tables.load_runs(copy)
    assert not runs["reached_target"].any()
    sp = tables.speedup_table(runs)
    assert len(sp) == 6
    assert sp["tta_speedup"].isna().all() and sp["tta_speedup_lo"].isna().all()
    assert sp["oracle_tta_method"].isna().all()
    assert sp["throughput_speedup"].notna().all()  # throughput is still compared
    tta = tables.tta_table(runs)
    assert (tta["reached"] == 0).all() and tta["tta_mean_s"].isna().all()
    # written out, the cell is empty: no number a reader could take for a result
    out = tmp_path / "speedup.csv"
    sp.to_csv(out, index=False)
    with open(out, newline="") as fh:
        assert all(row["tta_speedup"] == "" for row in csv.DictReader(fh))


def test_a_seed_run_twice_counts_once(swept: Path, tmp_path: Path) -> None:
    """A second ok run of the same seed (a retry into the same tree) replaces the first."""
    copy = tmp_path / "results"
    shutil.copytree(swept, copy)
    runs, _ = tables.load_runs(copy)
    first = runs[runs["method"] == "allreduce"].iloc[0]
    again = copy / (first["run"] + "-again")
    shutil.copytree(copy / first["run"], again)
    os.utime(again / "summary.json")  # finished later
    runs2, _ = tables.load_runs(copy)
    assert len(runs2) == len(runs) + 1
    ok = tables.ok_runs(runs2)
    assert len(ok) == len(runs)
    assert first["run"] + "-again" in set(ok["run"]) and first["run"] not in set(ok["run"])
    thr = tables.throughput_table(runs2)
    assert (thr["seeds"] == 1).all()



def test_figures_and_report_are_written_and_not_blank(swept: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg
    import pandas as pd

    out = tmp_path / "figs"
    res = CliRunner().invoke(analysis_app(), ["plot", str(swept), "--figures", str(out)])
    assert res.exit_code == 0, res.output
    # the tiny sweep's cross traffic is a ramp on the first-step clock: its figure too
    for name in ("throughput_vs_rate", "accuracy_vs_time", "adaptation_timeline", "speedup",
                 "ramp"):
        png, pdf = out / f"{name}.png", out / f"{name}.pdf"
        assert png.stat().st_size > 10_000, name
        assert pdf.stat().st_size > 5_000, name
        img = mpimg.imread(png)
        assert img.shape[0] > 200 and img.shape[1] > 300
        assert float(img[..., :3].std()) > 0.02, f"{name} looks blank"
    sp = pd.read_csv(out / "speedup.csv")
    assert {"rate_mbit", "baseline", "throughput_speedup", "tta_speedup"} <= set(sp.columns)
    assert len(sp) == 6
    # the runs the timeline figure drew (one seed, one rate, its cross traffic), step by step
    tl = pd.read_csv(out / "timeline.csv")
    assert tl.columns.tolist()[:4] == ["experiment", "method", "seed", "t_s"]
    assert len(tl) > 10 and tl["rate_mbit"].nunique() == 1 and tl["streams"].max() == 4

    report = tmp_path / "r.html"
    res = CliRunner().invoke(analysis_app(), ["report", str(swept), "--html", str(report),
                                      "--figures", str(out)])
    assert res.exit_code == 0, res.output
    page = report.read_text()
    assert page.count("data:image/png;base64,") == 5
    assert "speedup" in page and "tiny-dumbbell" in page and "torch" in page
    assert "src=\"http" not in page  # self-contained


def test_line_rate_model_is_computed_from_the_run_files(swept: Path) -> None:
    """compute (median rank-0 compute_s) + 2(N-1)/N x grad bytes x 8 / rate, from the raw
    files read here with csv/json, against the dashed line of the throughput figure."""
    import json
    import statistics

    from testbed.analysis import plots

    runs, steps = tables.load_runs(swept)
    model = plots.line_rate_model(tables.ok_runs(runs), steps, swept)
    # a curve over the measured rates of the one experiment (a formula, drawn dashed)
    assert len(model) >= 2
    assert (model["rate_mbit"].min(), model["rate_mbit"].max()) == (20, 200)
    compute, samples, grad, world = [], [], None, None
    for d in sorted(p.parent for p in swept.rglob("summary.json")):
        with open(d / "steps.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                if row["rank"] == "0" and row.get("samples"):
                    compute.append(float(row["compute_s"]))
                    samples.append(float(row["samples"]))
        start = json.loads((d / "workers" / "rank0.jsonl").read_text().splitlines()[0])
        grad = start["grad_bytes"]
        world = json.loads((d / "config.json").read_text())["world_size"]
    for _, m in model.iterrows():
        comm = 2 * (world - 1) / world * grad * 8 / (m["rate_mbit"] * 1e6)
        want = statistics.median(samples) / (statistics.median(compute) + comm)
        assert m["samples_per_s"] == pytest.approx(want, rel=1e-9)


def test_a_repeated_seed_counts_once(swept: Path, tmp_path: Path) -> None:
    import json
    import shutil

    copy = tmp_path / "res"
    shutil.copytree(swept, copy)
    first = sorted(p.parent for p in copy.rglob("summary.json"))[0]
    again = first.with_name(first.name + "-again")
    shutil.copytree(first, again)
    cfg = json.loads((again / "config.json").read_text())
    cfg["started_at"] = "2999-01-01T00:00:00+00:00"  # the repeat is the latest
    (again / "config.json").write_text(json.dumps(cfg))
    runs, _ = tables.load_runs(copy)
    assert len(runs) == 7 and tables.repeated_runs(runs) == 1
    assert set(tables.throughput_table(runs)["seeds"]) == {1}
    kept = tables.ok_runs(runs)
    assert str(again.relative_to(copy)) in set(kept["run"])
    assert str(first.relative_to(copy)) not in set(kept["run"])


def test_timeline_rows_carry_the_network_as_applied(swept: Path) -> None:
    """timeline.csv's join of steps.csv and events.csv, checked against the raw files: tiny's
    4 cross-traffic streams run between the applied cross_start and cross_stop."""
    from testbed.analysis import timeline_csv

    runs, steps = tables.load_runs(swept)
    row = runs[(runs["method"] == "allreduce") & (runs["rate_mbit"] == 20.0)].iloc[0]
    tl = timeline_csv.run_timeline(swept, row, steps[steps["run"] == row["run"]])
    raw = [r for r in _raw(swept / row["run"]) if r["rank"] == "0" and _f(r["samples"])]
    assert len(tl) == len(raw) and (tl["rate_mbit"] == 20.0).all()
    with open(swept / row["run"] / "events.csv", newline="") as fh:
        ev = {e["kind"]: float(e["t_applied"]) for e in csv.DictReader(fh)}
    offset = float(raw[0]["t"]) - float(raw[0]["t_worker"])  # launch clock - training clock
    on, off = ev["cross_start"] - offset, ev["cross_stop"] - offset
    inside = tl[(tl["t_s"] > on + 0.01) & (tl["t_s"] < off - 0.01)]
    outside = tl[(tl["t_s"] < on - 0.01) | (tl["t_s"] > off + 0.01)]
    assert len(inside) > 0 and (inside["streams"] == 4).all()
    assert len(outside) > 0 and (outside["streams"] == 0).all()
    assert list(tl.columns) == timeline_csv.COLUMNS
