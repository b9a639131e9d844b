"""The run folder's records: worker JSONL -> steps.csv rows and the metrics in summary.json.

Layout (DESIGN.md, "The run folder")::

    <run_dir>/config.json   resolved scenario + method + seed + versions + host facts
    <run_dir>/steps.csv     one row per worker per step (eval accuracy on its step's row)
    <run_dir>/events.csv    timeline actions, scheduled and applied times
    <run_dir>/link.csv      link probes (configured vs measured Mbit/s), when probed
    <run_dir>/summary.json  status ("running" -> "ok" | "failed" + reason) and metrics
    <run_dir>/workers/      rank<N>.log (stdout+stderr) and rank<N>.jsonl (raw records)

Files are written atomically (``testbed.common.files``).

Metric definitions (all from the workers' own records):

* ``t`` in steps.csv: the record's ``wall`` minus the launch wall time of the run, i.e.
  the same clock as events.csv; the worker's own ``t`` is kept as ``t_worker``.
* ``throughput_samples_per_s``: global samples (a step record's ``samples`` is batch x
  world size) over the training wall time, both from rank 0's step records. With more
  than two steps the first step is a warm-up and excluded: samples of steps 2..N /
  (wall of step N - wall of step 1). With one or two steps: all samples / rank 0's ``train_time_s``
  (or the span from its start record).
* ``time_to_accuracy_s``: rank 0's ``t`` (training clock of the worker) of the first eval
  record with accuracy >= target; null if never reached or no target.
* ``final_accuracy``: rank 0's summary ``final_accuracy``, else its last eval accuracy.
* ``bytes_sent_total``: sum of ``bytes_sent`` over all step records of all ranks.

Where a run's time goes (``phases_s`` in summary.json, ``phase_breakdown``), on one clock
(wall time) and along rank 0's path, which after the first barrier is every rank's path:

* ``build``: the emulated network (and link probes / iperf3 servers, when any);
* ``zygote_wait``: waiting for the pre-imported worker to finish its imports (the first
  run of a sweep or ``netsense run``; 0 afterwards; absent with fresh processes);
* ``launch``: from starting the worker processes to rank 0's interpreter reaching the
  worker module (process creation, namespace entry, interpreter start);
* ``imports``: torch and the worker's other modules (near 0 for a pre-imported worker);
* ``data_model``, ``rendezvous`` (``init_process_group``), ``ddp`` (DDP, hook, optimizer),
  ``barrier`` (the first barrier: waiting for the slowest rank);
* ``first_step``: the first training step (warm-up, outside the throughput);
* ``training``: the rest of the training loop; ``final_eval``: the closing evaluation;
* ``exit``: from the last rank's summary record to the last worker process gone;
* ``teardown``: cross-traffic, workers and network removed;
* ``other``: what remains of ``wall_s`` (writing config/results, polling granularity).

``overhead_s`` is ``wall_s`` minus rank 0's ``train_time_s`` (its training clock).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from testbed.common.files import read_jsonl

STEP_COLUMNS = [
    "rank", "t", "wall", "step", "samples", "compute_s", "comm_s", "step_s", "bytes_sent",
    "kept_ratio", "level", "loss", "accuracy", "t_worker",
]
LINK_COLUMNS = ["link", "src", "dst", "configured_mbit", "measured_mbit", "seconds"]


def load_worker_records(workers_dir: Path, world_size: int) -> dict[int, list[dict[str, Any]]]:
    return {r: read_jsonl(workers_dir / f"rank{r}.jsonl") for r in range(world_size)}


def step_rows(records: dict[int, list[dict[str, Any]]], launch_wall: float) -> tuple[
    list[dict[str, Any]], list[str]
]:
    """steps.csv rows (sorted by t, rank) and the column list including extra hook stats."""
    rows: list[dict[str, Any]] = []
    extras: set[str] = set()
    for rank, recs in records.items():
        by_step: dict[Any, dict[str, Any]] = {}
        for rec in recs:
            kind = rec.get("kind")
            if kind == "step":
                row = {k: v for k, v in rec.items() if k != "kind"}
                row["rank"] = rank
                row["t_worker"] = rec.get("t")
                if isinstance(rec.get("wall"), int | float):
                    row["t"] = round(rec["wall"] - launch_wall, 4)
                for k, v in row.items():
                    if k not in STEP_COLUMNS and not isinstance(v, dict | list):
                        extras.add(k)
                rows.append(row)
                by_step[rec.get("step")] = row
            elif kind == "eval":
                row = by_step.get(rec.get("step"))
                if row is not None:
                    row["accuracy"] = rec.get("accuracy")
                else:
                    row = {
                        "rank": rank, "step": rec.get("step"), "accuracy": rec.get("accuracy"),
                        "wall": rec.get("wall"), "t_worker": rec.get("t"),
                    }
                    if isinstance(rec.get("wall"), int | float):
                        row["t"] = round(rec["wall"] - launch_wall, 4)
                    rows.append(row)
    rows.sort(key=lambda r: (r.get("t") if r.get("t") is not None else 0.0, r["rank"]))
    return rows, STEP_COLUMNS + sorted(extras)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def metrics(
    records: dict[int, list[dict[str, Any]]], target_accuracy: float | None
) -> dict[str, Any]:
    """The summary.json metrics (definitions in the module docstring)."""
    r0 = records.get(0, [])
    steps0 = [r for r in r0 if r.get("kind") == "step"]
    evals0 = [r for r in r0 if r.get("kind") == "eval"]
    summ0 = next((r for r in reversed(r0) if r.get("kind") == "summary"), None)
    start0 = next((r for r in r0 if r.get("kind") == "start"), None)
    all_steps = [r for recs in records.values() for r in recs if r.get("kind") == "step"]

    # Step records carry *global* samples (batch x world size), so rank 0's alone count all.
    throughput = None
    train_time = None
    if len(steps0) > 2:
        first, last = steps0[0], steps0[-1]
        span = (_num(last.get("wall")) or 0.0) - (_num(first.get("wall")) or 0.0)
        samples = sum(_num(r.get("samples")) or 0.0 for r in steps0[1:])
        if span > 0:
            throughput = samples / span
            train_time = span
    elif steps0:
        samples = sum(_num(r.get("samples")) or 0.0 for r in steps0)
        span = _num(summ0.get("train_time_s")) if summ0 else None
        if span is None and start0 is not None:
            span = (_num(steps0[-1].get("wall")) or 0.0) - (_num(start0.get("wall")) or 0.0)
        if span and span > 0:
            throughput = samples / span
            train_time = span

    final_acc = _num(summ0.get("final_accuracy")) if summ0 else None
    if final_acc is None and evals0:
        final_acc = _num(evals0[-1].get("accuracy"))
    tta = None
    if target_accuracy is not None:
        for ev in evals0:
            acc = _num(ev.get("accuracy"))
            if acc is not None and acc >= target_accuracy:
                tta = _num(ev.get("t"))
                break
    comm = [c for c in (_num(r.get("comm_s")) for r in steps0) if c is not None]
    kept = [k for k in (_num(r.get("kept_ratio")) for r in steps0) if k is not None]
    return {
        "steps": len(steps0),
        "samples_total": int(sum(_num(r.get("samples")) or 0.0 for r in steps0)),
        "train_time_s": round(train_time, 4) if train_time else None,
        "throughput_samples_per_s": round(throughput, 3) if throughput else None,
        "final_accuracy": final_acc,
        "target_accuracy": target_accuracy,
        "time_to_accuracy_s": tta,
        "bytes_sent_total": int(sum(_num(r.get("bytes_sent")) or 0 for r in all_steps)),
        "comm_s_mean": round(sum(comm) / len(comm), 5) if comm else None,
        "kept_ratio_mean": round(sum(kept) / len(kept), 5) if kept else None,
        "worker_status": summ0.get("status") if summ0 else None,
    }


def _tail_records(path: Path, nbytes: int = 8192) -> list[dict[str, Any]]:
    """The complete JSON records in the last ``nbytes`` of a JSONL being written, newest
    first (a partly written last line is skipped)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - nbytes))
            tail = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in reversed(tail):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def last_step(path: Path) -> dict[str, Any] | None:
    """Last step record of a JSONL being written (reads only the file's tail)."""
    return next((r for r in _tail_records(path) if r.get("kind") == "step"), None)


def last_summary(path: Path) -> dict[str, Any] | None:
    """A worker's summary record, if it wrote one (the summary is its last record)."""
    recs = _tail_records(path)
    return recs[0] if recs and recs[0].get("kind") == "summary" else None


def phase_breakdown(records: dict[int, list[dict[str, Any]]], *, launch_wall: float | None,
                    wall_s: float, build_s: float | None, teardown_s: float | None,
                    workers_done_wall: float | None,
                    zygote_wait_s: float | None = None) -> dict[str, Any]:
    """``phases_s`` and ``overhead_s`` of summary.json (definitions in the module doc).

    Phases a run did not reach (a worker that died in set-up) are left out rather than
    guessed; ``other`` then absorbs them.
    """
    r0 = records.get(0, [])
    start = next((r for r in r0 if r.get("kind") == "start"), None)
    first = next((r for r in r0 if r.get("kind") == "step"), None)
    summ = next((r for r in reversed(r0) if r.get("kind") == "summary"), None)
    phases: dict[str, float] = {}
    if build_s is not None:
        phases["build"] = build_s
    if zygote_wait_s is not None:
        phases["zygote_wait"] = zygote_wait_s
    if start is not None and launch_wall is not None:
        proc_wall, imports = _num(start.get("proc_wall")), _num(start.get("imports_s"))
        if proc_wall is not None and imports is not None:
            phases["launch"] = max(proc_wall - launch_wall, 0.0)
            phases["imports"] = imports
        set_up = start.get("phases")
        if isinstance(set_up, dict):
            phases.update({k: v for k, v in set_up.items() if _num(v) is not None})
    train_time = _num(summ.get("train_time_s")) if summ else None
    if first is not None and train_time is not None:
        first_t = _num(first.get("t")) or 0.0
        final_eval = _num(summ.get("final_eval_s")) or 0.0
        phases["first_step"] = first_t
        phases["training"] = max(train_time - first_t, 0.0)
        phases["final_eval"] = final_eval
    summary_walls = [_num(r.get("wall")) for recs in records.values() for r in recs
                     if r.get("kind") == "summary"]
    last_summary_wall = max((w for w in summary_walls if w is not None), default=None)
    if workers_done_wall is not None and last_summary_wall is not None:
        phases["exit"] = max(workers_done_wall - last_summary_wall, 0.0)
    if teardown_s is not None:
        phases["teardown"] = teardown_s
    phases["other"] = max(wall_s - sum(phases.values()), 0.0)
    return {
        "phases_s": {k: round(v, 3) for k, v in phases.items()},
        "overhead_s": round(wall_s - train_time, 3) if train_time is not None else None,
    }
