"""The worker's records as typed code: what the worker writes parses back to the same
object, and a damaged or old record reads without stopping its reader."""

from __future__ import annotations

import json

from workloads import records as r


def test_each_kind_round_trips_through_json() -> None:
    recs = [
        r.StartRecord(t=0.0, wall=1.0, rank=0, world_size=2, model="mlp", phases={"ddp": 0.1},
                      momentum=None),
        r.StepRecord(t=0.5, wall=1.5, step=1, samples=16, compute_s=0.1, comm_s=0.2,
                     step_s=0.3, bytes_sent=100, kept_ratio=0.5, level="topk", loss=2.0,
                     stats={"collectives": 3, "est_rate_mbit": 9.5}),
        r.EvalRecord(t=0.6, wall=1.6, step=1, accuracy=0.5, loss=1.0, eval_s=0.1,
                     samples_evaluated=64),
        r.SummaryRecord(t=0.7, wall=1.7, steps=1, samples=16, status="ok", train_time_s=0.7,
                        final_eval_s=0.0),
    ]
    for rec in recs:
        text = json.dumps(rec.to_json())
        assert r.parse(json.loads(text)) == rec
    step = recs[1].to_json()
    assert step["collectives"] == 3 and "stats" not in step  # hook stats are written flat
    assert "reached_target" not in recs[2].to_json()  # only when a target is set
    assert "error" not in recs[3].to_json()


def test_a_hook_stat_named_like_a_worker_field_is_renamed() -> None:
    rec = r.StepRecord(step=2, samples=8, stats={"step": 99, "samples": 1, "ratio": 0.1})
    out = rec.to_json()
    assert (out["step"], out["samples"], out["hook_step"], out["hook_samples"]) == (2, 8, 99, 1)
    assert out["ratio"] == 0.1


def test_damaged_records_read_as_defaults() -> None:
    assert r.parse({"kind": "nonsense"}) is None and r.parse([1, 2]) is None
    assert r.parse("step") is None
    rec = r.parse({"kind": "step", "step": "three", "samples": True, "comm_s": float("nan"),
                   "level": 4})
    assert isinstance(rec, r.StepRecord)
    assert (rec.step, rec.samples, rec.comm_s, rec.level) == (None, None, None, None)
    start = r.parse({"kind": "start", "phases": "x"})
    assert isinstance(start, r.StartRecord) and start.phases == {}


def test_legacy_step_stats_read_under_todays_names() -> None:
    rec = r.parse({"kind": "step", "step": 1, "est_rate_Bps": 1.25e6, "est_bdp_B": 500,
                   "model_fixed_ms": 20.0, "model_bw_MBps": 2.5})
    assert isinstance(rec, r.StepRecord)
    assert rec.stats == {"est_rate_mbit": 10.0, "est_bdp_bytes": 500.0,
                         "model_fixed_s": 0.02, "model_bw_mbit": 20.0}


def test_rank_records_group_by_kind_and_keep_the_last_summary() -> None:
    raw = [{"kind": "start", "rank": 1}, {"kind": "step", "step": 1},
           {"kind": "eval", "step": 1, "accuracy": 0.2}, {"kind": "step", "step": 2},
           {"kind": "summary", "status": "failed"}, {"kind": "summary", "status": "ok"},
           {"no": "kind"}]
    ranks = r.RankRecords.parse(raw)
    assert ranks.start is not None and ranks.start.rank == 1
    assert [s.step for s in ranks.steps] == [1, 2] and ranks.evals[0].accuracy == 0.2
    assert ranks.summary is not None and ranks.summary.status == "ok"
