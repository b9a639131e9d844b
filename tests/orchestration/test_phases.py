"""summary.json's time breakdown and the reading of a worker's final record (no emulation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.orchestration.worker_records import last_summary, phase_breakdown

LAUNCH = 1000.0


def _records() -> dict[int, list[dict]]:
    start = {"kind": "start", "t": 0.0, "wall": LAUNCH + 5.0, "proc_wall": LAUNCH + 0.5,
             "imports_s": 2.0, "setup_s": 2.5,
             "phases": {"data_model": 0.2, "rendezvous": 1.0, "ddp": 1.0, "barrier": 0.3}}
    steps = [{"kind": "step", "t": 0.4 + 0.1 * i, "wall": LAUNCH + 5.4 + 0.1 * i, "step": i + 1}
             for i in range(10)]
    summ = {"kind": "summary", "t": 1.5, "wall": LAUNCH + 6.5, "status": "ok",
            "train_time_s": 1.3, "final_eval_s": 0.2}
    r1_summ = dict(summ, wall=LAUNCH + 6.6)
    return {0: [start, *steps, summ], 1: [dict(start), r1_summ]}


def test_phases_follow_rank0_and_add_up_to_wall() -> None:
    out = phase_breakdown(_records(), launch_wall=LAUNCH, wall_s=8.0, build_s=0.3,
                          teardown_s=0.4, workers_done_wall=LAUNCH + 6.8)
    p = out["phases_s"]
    assert p["launch"] == pytest.approx(0.5)
    assert p["imports"] == 2.0 and p["rendezvous"] == 1.0 and p["barrier"] == 0.3
    assert p["first_step"] == pytest.approx(0.4)
    assert p["training"] == pytest.approx(0.9)  # train_time_s - first step
    assert p["final_eval"] == 0.2
    assert p["exit"] == pytest.approx(0.2)  # from the LAST rank's summary to all gone
    assert p["teardown"] == 0.4
    assert sum(p.values()) == pytest.approx(8.0, abs=0.01)  # "other" closes the sum
    assert out["overhead_s"] == pytest.approx(8.0 - 1.3)


def test_phases_of_a_run_that_never_trained() -> None:
    recs = {0: [], 1: []}
    out = phase_breakdown(recs, launch_wall=LAUNCH, wall_s=3.0, build_s=0.3, teardown_s=0.5,
                          workers_done_wall=None)
    assert out["overhead_s"] is None
    assert out["phases_s"] == {"build": 0.3, "teardown": 0.5, "other": 2.2}


def test_last_summary_only_when_it_is_the_last_record(tmp_path: Path) -> None:
    f = tmp_path / "rank0.jsonl"
    assert last_summary(f) is None  # no file
    f.write_text(json.dumps({"kind": "step", "step": 1}) + "\n")
    assert last_summary(f) is None
    f.write_text(f.read_text() + json.dumps({"kind": "summary", "status": "ok"}) + "\n")
    assert last_summary(f) == {"kind": "summary", "status": "ok"}
    f.write_text(f.read_text() + '{"kind": "summ')  # a torn line after it is ignored
    assert last_summary(f)["status"] == "ok"
