"""The workers' records as the orchestrator reads them (their format: ``workloads.records``):
worker JSONL -> steps.csv rows and the metrics in summary.json; the last step or summary
record of a rank, while it runs.

Named for what it reads (issue 51): it was ``run_records``, which read as the run folder's
files; the folder is ``testbed.orchestration.rundir``'s, which writes what is computed here.

Layout (DESIGN.md, "The run folder")::

    <run_dir>/config.json   resolved scenario + method + seed + versions + host facts
    <run_dir>/steps.csv     one row per worker per step (eval accuracy on its step's row)
    <run_dir>/events.csv    timeline actions, scheduled and applied times
    <run_dir>/link.csv      link probes (configured vs measured Mbit/s), when probed
    <run_dir>/summary.json  status ("running" -> "ok" | "failed" + reason) and metrics
    <run_dir>/workers/      rank<N>.log (stdout+stderr) and rank<N>.jsonl (raw records)

Files are written atomically (``testbed.common.files``).

The workers' records are ``workloads.records`` (typed, parsed here); the metrics in
summary.json are ``testbed.common.metrics`` computed on the steps.csv rows built here, the
same functions and rows the tables use. In steps.csv ``t`` is the record's ``wall`` minus
the launch wall time of the run (the clock of events.csv); the worker's own ``t`` is kept as
``t_worker``. Beside the metrics: ``final_accuracy`` falls back to rank 0's summary record
when no evaluation row exists; ``bytes_sent_total`` sums ``bytes_sent`` over all step
records of all ranks.

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

from pathlib import Path
from typing import Any, NamedTuple

from netsenseml.dilation import NONE, Dilation
from testbed.common import metrics as run_metrics
from testbed.common.files import read_jsonl, read_jsonl_tail
from testbed.common.metrics import num as _num
from workloads.records import EvalRecord, RankRecords, StepRecord

#: steps.csv's fixed columns: the step record's fields, the evaluation's accuracy on its
#: step's row, and the two clocks (module doc); hook statistics follow, sorted.
STEP_COLUMNS = [
    "rank", "t", "wall", "step", "samples", "compute_s", "comm_s", "step_s", "bytes_sent",
    "kept_ratio", "level", "loss", "accuracy", "t_worker",
]
LINK_COLUMNS = ["link", "src", "dst", "configured_mbit", "measured_mbit", "seconds"]


def load_worker_records(workers_dir: Path, world_size: int) -> dict[int, list[dict[str, Any]]]:
    """Every rank's raw records (JSON objects in file order); :func:`ranks` types them."""
    return {r: read_jsonl(workers_dir / f"rank{r}.jsonl") for r in range(world_size)}


def ranks(records: dict[int, list[dict[str, Any]]]) -> dict[int, RankRecords]:
    """The raw records of :func:`load_worker_records` as typed records per rank."""
    return {rank: RankRecords.parse(recs) for rank, recs in records.items()}


def _row_of(rank: int, rec: StepRecord | EvalRecord, launch_wall: float,
            dilation: Dilation = NONE) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "step": rec.step, "wall": rec.wall, "t_worker": rec.t}
    if rec.wall is not None:
        row["t"] = round(dilation.virtual_s(rec.wall - launch_wall), 4)
    return row


class StepsCsv(NamedTuple):
    rows: list[dict[str, Any]]  # sorted by t, rank
    columns: list[str]  # STEP_COLUMNS, then the hook statistics found, sorted


def steps_csv_rows(records: dict[int, list[dict[str, Any]]], launch_wall: float,
                   dilation: Dilation | float = NONE) -> StepsCsv:
    """steps.csv's rows and columns.

    ``dilation``: the run's time-dilation factor; ``t`` is then virtual, as the workers'
    own clock already is (``testbed.orchestration.dilation``).

    One row per step record; an evaluation's accuracy goes on its step's row (a row of its
    own when no step record has that step number).
    """
    dilation = Dilation.of(dilation)
    rows: list[dict[str, Any]] = []
    extras: set[str] = set()
    for rank, recs in ranks(records).items():
        by_step: dict[Any, dict[str, Any]] = {}
        for st in recs.steps:
            row = _row_of(rank, st, launch_wall, dilation)
            fields = st.to_json()
            for k in ("kind", "t", "wall"):
                fields.pop(k)
            row.update(fields)
            extras.update(k for k, v in fields.items()
                          if k not in STEP_COLUMNS and not isinstance(v, dict | list))
            rows.append(row)
            by_step[st.step] = row
        for ev in recs.evals:
            row = by_step.get(ev.step)
            if row is None:
                row = _row_of(rank, ev, launch_wall, dilation)
                rows.append(row)
            row["accuracy"] = ev.accuracy
    rows.sort(key=lambda r: (r.get("t") if r.get("t") is not None else 0.0, r["rank"]))
    return StepsCsv(rows, STEP_COLUMNS + sorted(extras))


#: Deprecated name (two different functions were called step_rows): use steps_csv_rows.
step_rows = steps_csv_rows


def _mean(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


def metrics(
    records: dict[int, list[dict[str, Any]]], target_accuracy: float | None,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary.json metrics (``testbed.common.metrics`` on the steps.csv rows; pass
    ``rows`` when they are at hand, else they are built with a launch time of 0, which no
    metric depends on)."""
    typed = ranks(records)
    r0 = typed.get(0, RankRecords())
    if rows is None:
        rows = steps_csv_rows(records, 0.0).rows
    throughput = run_metrics.throughput(rows)
    train_time = run_metrics.train_span_s(rows)
    final_acc = run_metrics.final_accuracy(rows)
    if final_acc is None and r0.summary is not None:
        final_acc = r0.summary.final_accuracy
    comm = _mean([st.comm_s for st in r0.steps])
    kept = _mean([st.kept_ratio for st in r0.steps])
    return {
        "steps": len(r0.steps),
        "samples_total": int(sum(st.samples or 0 for st in r0.steps)),
        "train_time_s": round(train_time, 4) if train_time else None,
        "throughput_samples_per_s": round(throughput, 3) if throughput else None,
        "steps_per_s": round(sps, 3) if (sps := run_metrics.steps_per_s(rows)) else None,
        "final_accuracy": final_acc,
        "target_accuracy": target_accuracy,
        "time_to_accuracy_s": run_metrics.time_to_accuracy(rows, target_accuracy),
        "bytes_sent_total": int(sum(st.bytes_sent or 0 for recs in typed.values()
                                    for st in recs.steps)),
        "comm_s_mean": round(comm, 5) if comm is not None else None,
        "kept_ratio_mean": round(kept, 5) if kept is not None else None,
        "worker_status": r0.summary.status if r0.summary else None,
        **_own_job_facts(typed),
        **({"overruns": over} if (over := run_metrics.overruns(rows)) is not None else {}),
    }


def _own_job_facts(typed: dict[int, RankRecords]) -> dict[str, Any]:
    """An own job's: whether it reported any accuracy (``accuracy_reported``: the tables
    then say "not reported by the job", not "not reached") and where its samples came from
    (``samples_from``, ``netsenseml.job``); nothing for the built-in worker."""
    r0 = typed.get(0, RankRecords())
    if r0.start is None or not r0.start.own_job:
        return {}
    return {"accuracy_reported": any(recs.evals for recs in typed.values()),
            "samples_from": r0.summary.samples_from if r0.summary else None}


def last_step(path: Path) -> dict[str, Any] | None:
    """Last step record of a JSONL being written (reads only the file's tail)."""
    return next((r for r in read_jsonl_tail(path) if r.get("kind") == "step"), None)


def last_summary(path: Path) -> dict[str, Any] | None:
    """A worker's summary record, if it wrote one (the summary is its last record)."""
    recs = read_jsonl_tail(path)
    return recs[0] if recs and recs[0].get("kind") == "summary" else None


def phase_breakdown(records: dict[int, list[dict[str, Any]]], *, launch_wall: float | None,
                    wall_s: float, build_s: float | None, teardown_s: float | None,
                    workers_done_wall: float | None,
                    zygote_wait_s: float | None = None,
                    dilation: Dilation | float = NONE) -> dict[str, Any]:
    """``phases_s`` and ``overhead_s`` of summary.json (definitions in the module doc).

    Phases a run did not reach (a worker that died in set-up) are left out rather than
    guessed; ``other`` then absorbs them. Every phase is in real (wall) seconds: under time
    dilation the training clock's phases are taken back to real seconds, since the
    breakdown is about what the run costs on this host.
    """
    typed = ranks(records)
    r0 = typed.get(0, RankRecords())
    start, summ = r0.start, r0.summary
    first = r0.steps[0] if r0.steps else None
    phases: dict[str, float] = {}
    if build_s is not None:
        phases["build"] = build_s
    if zygote_wait_s is not None:
        phases["zygote_wait"] = zygote_wait_s
    if start is not None and launch_wall is not None:
        if start.proc_wall is not None and start.imports_s is not None:
            phases["launch"] = max(start.proc_wall - launch_wall, 0.0)
            phases["imports"] = start.imports_s
        phases.update({k: v for k, v in start.phases.items() if _num(v) is not None})
    d = Dilation.of(dilation)
    train_time = d.real_s(summ.train_time_s) if summ and summ.train_time_s is not None else None
    if first is not None and summ is not None and train_time is not None:
        first_t = d.real_s(first.t or 0.0)
        phases["first_step"] = first_t
        phases["training"] = max(train_time - first_t, 0.0)
        phases["final_eval"] = d.real_s(summ.final_eval_s or 0.0)
    summary_walls = [recs.summary.wall for recs in typed.values() if recs.summary is not None]
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
