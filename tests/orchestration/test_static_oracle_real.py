"""NetSenseML at a static rate against the best fixed level there (``ideal.static_vs_oracle``),
on a tiny REAL sweep: a 1+1 dumbbell at 20 Mbit/s, allreduce and top-k 0.01 for a short
while each (their step times: the crossover table's side), NetSenseML trained to the target
(its measured TTA), 2 seeds, Mininet + gloo. The table is checked against a recomputation
here from the raw steps.csv files with the csv module (independently of pandas, tables.py
and ideal.py): which level is the oracle, its projected time to target, NetSenseML's mean
time to target and their ratio.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.analysis import ideal, report, tables
from tests.cli.apps import analysis_app

pytestmark = [pytest.mark.emulation, pytest.mark.slow]  # slow: a real sweep of its own

TARGET = 0.9
WORKERS, BATCH = 2, 32
#: the steps to target the sweep's convergence table states (the test's input)
STEPS = {"allreduce": 60, "topk:0.01": 90}
SCENARIO = {
    "topology": {"kind": "dumbbell", "n_left": 1, "n_right": 1, "n_cross": 0,
                 "bottleneck_mbit": 20, "access_mbit": 1000, "queue_pkts": 100},
    "workload": {"model": "mlp", "dataset": "digits", "batch_size": BATCH,
                 "time_limit_s": 1.5, "eval_every": 5, "target_accuracy": TARGET,
                 "args": {"width": 256}},
    "methods": ["allreduce"],
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("static")
    table = tmp / "conv.json"
    table.write_text(json.dumps({
        "format": "netsense-convergence/1", "world_size": WORKERS, "max_steps": 500,
        "levels": {("none" if m == "allreduce" else m): {"method": m, "steps": [n]}
                   for m, n in STEPS.items()}}))
    static = {**SCENARIO, "name": "tiny-static", "description": "static 20 Mbit/s",
              "convergence": str(table)}
    tta = {**static, "name": "tiny-static-tta", "description": "static 20 Mbit/s, to the target",
           "workload": {**SCENARIO["workload"], "time_limit_s": 12,
                        "args": {"width": 256, "stop-at-target": True}}}
    sweep = {"name": "tiny-static", "description": "static oracle vs NetSenseML", "seeds": [0, 1],
             "experiments": [
                 {"name": "static", "kind": "throughput", "scenario": static,
                  "methods": list(STEPS)},
                 {"name": "static-tta", "kind": "tta", "scenario": tta,
                  "methods": ["netsenseml"]}]}
    spec = tmp / "tiny-static.yaml"
    spec.write_text(json.dumps(sweep))  # JSON is YAML
    root = tmp / "results"
    res = CliRunner().invoke(analysis_app(), ["sweep", str(spec), "--results", str(root)])
    assert res.exit_code == 0, res.output
    return root


def _rank0(run: Path) -> list[dict[str, str]]:
    with open(run / "steps.csv") as fh:
        return [r for r in csv.DictReader(fh) if r["rank"] == "0"]


def _step_s(run: Path) -> float:
    """Seconds per step of a fixed run: workers x batch over its samples per second (the
    training steps after the first, by the run clock)."""
    rows = sorted((r for r in _rank0(run) if r["samples"] not in ("", None)),
                  key=lambda r: float(r["t"]))
    # DDP's start-up steps (marked `startup`) are left out where two steps remain
    settled = [r for r in rows if r.get("startup") in ("", None, "0", "0.0")]
    rows = settled if len(settled) >= 2 else rows
    span = float(rows[-1]["t"]) - float(rows[0]["t"])
    return WORKERS * BATCH / (sum(float(r["samples"]) for r in rows[1:]) / span)


def _tta(run: Path) -> float:
    return min(float(r["t_worker"]) for r in _rank0(run)
               if r["accuracy"] not in ("", None) and float(r["accuracy"]) >= TARGET)


def test_static_table_matches_recomputation_from_raw_files(swept: Path) -> None:
    folders = {p.parent.relative_to(swept).parts[1:]: p.parent for p in swept.rglob("summary.json")}
    assert all(json.loads((f / "summary.json").read_text())["status"] == "ok"
               for f in folders.values()), folders
    by = {(exp, name.rpartition("-s")[0].replace("topk-", "topk:"), int(name.rpartition("-s")[2])): f
          for (exp, *_, name), f in folders.items()}
    # the oracle: the fixed level with the least mean step time x steps to target
    projected = {m: statistics.fmean(_step_s(by[("static", m, s)]) for s in (0, 1)) * n
                 for m, n in STEPS.items()}
    oracle = min(projected, key=projected.get)
    ns = [_tta(by[("static-tta", "netsenseml", s)]) for s in (0, 1)]

    runs, steps = tables.load_runs(swept)
    got = ideal.static_vs_oracle(swept, runs, steps)
    assert len(got) == 1, got
    row = got.iloc[0]
    assert row["experiment"] == "tiny-static/static-tta"
    assert row["static_experiment"] == "tiny-static/static"
    assert row["workers"] == WORKERS and row["rate_mbit"] == 20
    assert row["oracle_level"] == oracle
    assert row["oracle_tta_s"] == pytest.approx(projected[oracle], rel=1e-6)
    assert row["netsenseml_reached"] == 2 and row["seeds"] == 2
    assert row["netsenseml_tta_s"] == pytest.approx(statistics.fmean(ns), rel=1e-6)
    assert row["netsenseml_x_oracle"] == pytest.approx(projected[oracle] / statistics.fmean(ns), rel=1e-6)
    assert row["netsenseml_x_oracle_lo"] <= row["netsenseml_x_oracle"] <= row["netsenseml_x_oracle_hi"]
    assert not math.isnan(row["netsenseml_x_oracle_lo"])
    assert row["netsenseml_levels"], "the levels NetSenseML sent are named"


def test_the_report_shows_the_static_table(swept: Path) -> None:
    html = report.build_report(swept, log=lambda _m: None).read_text()
    assert "NetSenseML at static rates vs the best fixed level" in html
