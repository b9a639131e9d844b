"""``calibrate.read_run``, the one reader of a finished run's rank 0 records (``netsense
calibrate`` and ``benchmarks/convergence.py`` both read runs with it)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.orchestration.convergence_table import read_run


def _write(folder: Path, lines: list[str]) -> Path:
    folder.mkdir()
    (folder / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_finished_run_is_read_through_the_records(tmp_path: Path) -> None:
    recs = [{"kind": "start", "t": 0.0, "params": 10, "grad_bytes": 40},
            *({"kind": "step", "t": 0.1 * i, "step": i, "step_s": 0.1 + 0.01 * i} for i in (1, 2, 3)),
            {"kind": "eval", "t": 1.0, "step": 2, "accuracy": 0.5, "eval_s": 0.2, "reached_target": False},
            {"kind": "eval", "t": 2.0, "step": 3, "accuracy": 0.9, "eval_s": 0.3, "reached_target": True},
            {"kind": "summary", "steps": 3, "status": "ok", "final_accuracy": 0.9}]
    got = read_run(_write(tmp_path / "ok", [json.dumps(r) for r in recs]))
    assert got is not None
    assert (got["steps"], got["reached"], got["steps_run"], got["step_ms"]) == (3, True, 3, 120.0)
    assert got["train_s"] == 2.0 - 0.3 - 0.2
    assert (got["params"], got["grad_bytes"], got["final_accuracy"]) == (10, 40, 0.9)


def test_an_unfinished_run_is_none(tmp_path: Path) -> None:
    failed = _write(tmp_path / "failed", [json.dumps({"kind": "summary", "status": "failed"})])
    torn = _write(tmp_path / "torn", [json.dumps({"kind": "step", "step": 1}), '{"kind": "summ'])
    assert read_run(failed) is None and read_run(torn) is None
    assert read_run(tmp_path / "missing") is None
