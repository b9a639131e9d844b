"""One definition of the per-run metrics: summary.json (the orchestrator, from the workers'
records) and the tables (from steps.csv read back) give the same numbers, for every step
count, including the short runs where two definitions used to disagree."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from testbed.analysis import loading, tables
from testbed.common import files
from testbed.common import metrics as m
from testbed.orchestration import worker_records

LAUNCH = 1000.0


def rank_records(rank: int, walls: list[float], accs: dict[int, float]) -> list[dict]:
    """One rank's JSONL records: step i ends at walls[i-1] (clock origin: the first wall
    minus 0.5 s), evaluations after the steps in ``accs``."""
    origin = walls[0] - 0.5
    recs: list[dict] = [{"kind": "start", "t": 0.0, "wall": origin, "rank": rank}]
    for i, w in enumerate(walls, start=1):
        recs.append({"kind": "step", "t": w - origin, "wall": w, "step": i, "samples": 16,
                     "comm_s": 0.01, "bytes_sent": 100, "kept_ratio": 1.0, "level": "none",
                     "loss": 1.0})
        if i in accs:
            recs.append({"kind": "eval", "t": w - origin + 0.2, "wall": w + 0.2, "step": i,
                         "accuracy": accs[i], "loss": 0.5})
    recs.append({"kind": "summary", "t": walls[-1] - origin + 0.3, "wall": walls[-1] + 0.3,
                 "status": "ok", "steps": len(walls), "train_time_s": walls[-1] - origin})
    return recs


def both_ways(tmp_path, walls: list[float], accs: dict[int, float], target: float):
    recs = {r: rank_records(r, [w + 0.001 * r for w in walls], accs) for r in (0, 1)}
    rows, cols = worker_records.steps_csv_rows(recs, LAUNCH)
    summary = worker_records.metrics(recs, target, rows)
    files.write_csv(tmp_path / "steps.csv", cols, rows)
    steps = pd.read_csv(tmp_path / "steps.csv")
    return summary, steps


def same(a: float | None, b: float, rel: float = 1e-3) -> bool:
    return (a is None and math.isnan(b)) or (a is not None and b == pytest.approx(a, rel=rel))


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_summary_and_tables_agree_for_every_step_count(tmp_path, n: int) -> None:
    walls = [LAUNCH + 2.0 + 0.5 * i + 0.1 * i * i for i in range(n)]
    summary, steps = both_ways(tmp_path, walls, {n: 0.9}, target=0.8)
    assert same(summary["throughput_samples_per_s"], tables.run_throughput(steps))
    assert same(summary["time_to_accuracy_s"], tables.run_tta(steps, 0.8))
    assert summary["steps"] == tables.rank0_steps(steps) == n


def test_throughput_by_hand(tmp_path) -> None:
    """Steps ending at 10, 11 and 13 s: steps 2 and 3 (32 samples) over 3 s; one or no
    step is all warm-up, so no throughput."""
    summary, steps = both_ways(tmp_path, [LAUNCH + 10, LAUNCH + 11, LAUNCH + 13], {}, 0.5)
    assert summary["throughput_samples_per_s"] == pytest.approx(32 / 3, rel=1e-3)
    assert tables.run_throughput(steps) == pytest.approx(32 / 3, rel=1e-3)
    assert summary["train_time_s"] == pytest.approx(3.0)
    one = [{"rank": 0, "t": 1.0, "samples": 16}]
    assert m.throughput(one) is None and m.throughput([]) is None


def test_a_methods_warmup_steps_are_not_its_throughput() -> None:
    """PowerSGD's two dense steps (``warmup``) are left out as the first step is: the first
    steady step is the reference point. Steps end at 1, 5, 9, 10, 11 s; steps 1-2 warm-up."""
    rows = [{"rank": 0, "t": t, "samples": 16, **({"warmup": 1} if i in (0, 1) else {})}
            for i, t in enumerate((1.0, 5.0, 9.0, 10.0, 11.0))]
    assert m.throughput(rows) == pytest.approx(32 / 2)  # steps 4 and 5, from 9 s to 11 s
    assert m.train_span_s(rows) == pytest.approx(2.0)
    # the tables (steps.csv's columns) leave the same steps out as summary.json
    assert tables.run_throughput(pd.DataFrame(rows)) == pytest.approx(32 / 2)
    plain = [{k: v for k, v in r.items() if k != "warmup"} for r in rows]
    assert m.throughput(plain) == pytest.approx(64 / 10)


def test_ddps_start_up_is_left_out_where_two_steps_remain() -> None:
    """DDP's first two steps (``startup``: its second rebuilds the buckets) are not the
    steady state: steps end at 1, 3, 4, 5, 6 s; throughput counts steps 4-5 from 4 s. A
    run of three steps keeps them (one steady step would leave no throughput)."""
    rows = [{"rank": 0, "t": t, "samples": 16, **({"startup": 1} if i in (0, 1) else {})}
            for i, t in enumerate((1.0, 3.0, 4.0, 5.0, 6.0))]
    assert m.throughput(rows) == pytest.approx(32 / 2)
    assert tables.run_throughput(pd.DataFrame(rows)) == pytest.approx(32 / 2)
    short = rows[:3]
    assert m.throughput(short) == pytest.approx(32 / 3)  # steps 2-3 from 1 s, as before
    # the overruns count the same steps: rank 0's step 2 ran late, step 5 too
    late = [dict(r, step=i + 1, pace_overrun=int(i in (1, 4)), pace_late_s=0.5 if i in (1, 4)
                 else 0.0, step_s=1.0) for i, r in enumerate(rows)]
    over = m.overruns(late)
    assert (over["steps"], over["of"], over["late_share"]) == (1, 2, 0.25)


def test_powersgd_marks_its_dense_start_as_warmup() -> None:
    """The hook state says a step was warm-up while PowerSGD's ``iter`` (steps ended) is at
    most ``start_powerSGD_iter``: steps 1 and 2 with the default 2; never for other methods."""
    from types import SimpleNamespace

    from netsenseml.payload import PowerSGDPayload
    from netsenseml.state import NetSenseState

    ps = PowerSGDPayload(None, 4, start_powerSGD_iter=2)
    seen = []
    for ended in (1, 2, 3, 4):
        ps.iter = ended
        seen.append(NetSenseState.in_warmup(SimpleNamespace(powersgd=ps)))
    assert seen == [True, True, False, False]
    assert not NetSenseState.in_warmup(SimpleNamespace(powersgd=None))


def test_time_to_accuracy_is_the_end_of_the_step_the_evaluation_followed(tmp_path) -> None:
    walls = [LAUNCH + 1 + i for i in range(6)]  # training clock: step i ends at i - 0.5
    summary, steps = both_ways(tmp_path, walls, {2: 0.5, 4: 0.85, 6: 0.9}, target=0.8)
    assert summary["time_to_accuracy_s"] == pytest.approx(3.5)  # step 4, not its eval
    assert tables.run_tta(steps, 0.8) == pytest.approx(3.5)
    assert summary["final_accuracy"] == 0.9
    assert m.time_to_accuracy(steps.to_dict("records"), 0.95) is None
    assert m.time_to_accuracy(steps.to_dict("records"), None) is None


def test_an_old_run_folder_loads_under_todays_step_names(tmp_path) -> None:
    """steps.csv written before the units were in the names: est_rate_Bps and model_*_ms
    read as est_rate_mbit and model_*_s, converted."""
    run = tmp_path / "old" / "r1"
    run.mkdir(parents=True)
    files.write_json(run / "config.json", {"method": "netsenseml", "seed": 0})
    files.write_json(run / "summary.json", {"status": "ok", "method": "netsenseml"})
    rows = [{"rank": 0, "t": 1.0 + i, "samples": 16, "step": i + 1, "est_rate_Bps": 1.25e6,
             "model_step_ms": 250.0, "model_bw_MBps": 2.5} for i in range(3)]
    files.write_csv(run / "steps.csv", sorted(rows[0]), rows)
    runs, steps = tables.load_runs(tmp_path)
    assert len(runs) == 1 and not loading.excluded_of(runs)
    assert steps["est_rate_mbit"].iloc[0] == pytest.approx(10.0)
    assert steps["model_step_s"].iloc[0] == pytest.approx(0.25)
    assert steps["model_bw_mbit"].iloc[0] == pytest.approx(20.0)
    assert not {"est_rate_Bps", "model_step_ms", "model_bw_MBps"} & set(steps.columns)
