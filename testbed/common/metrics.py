"""The per-run metrics, defined once: throughput, time to accuracy, final accuracy.

Why one module: summary.json (written by the orchestrator when a run ends) and the tables and
figures (recomputed from steps.csv, so anyone can check them against the per-step rows) used
to carry one definition each; they disagreed for runs of exactly two steps. Both now call
the functions here on the same rows: steps.csv's rows (``testbed.orchestration.worker_records``
builds them from the workers' records, and summary.json's metrics are computed from those
rows before they are written), one dict per worker per step. Intervals over seeds are
``testbed.common.stats``.

Definitions (rows are those of the lowest rank, rank 0, which logs the *global* samples:
batch x world size):

- **throughput** (samples/s): the samples of every training step after the first one,
  divided by the time from the end of the first step to the end of the last
  (``sum(samples[1:]) / (t_last - t_first)``, ``t`` on one clock). The first step is left
  out: it holds the rendezvous and DDP's bucket set-up, not steady-state training; so are
  the steps a method marks as its own warm-up (``warmup``: PowerSGD's dense steps before
  ``start_powerSGD_iter``) and, where at least two steps remain after them, DDP's
  start-up (``startup``: its first two steps, marked by the hook's state -- DDP rebuilds
  its buckets once, at the second step, which is the first on the final layout and pays
  its one-off costs: a payload run's second step ran ~10 % long and overran its slot on
  every rank); the first step after them is the reference point. A run too short to
  leave the start-up out keeps it (a smoke run still has a throughput). None
  with fewer than two steps (one step is all warm-up) or no elapsed time, and None (not 0)
  where no step after the first has samples: an own job that neither reported samples nor
  let the hook see its batch (``netsenseml.job``) trained an unknown number, not none.
- **steps/s**: the training steps after the first (and the warm-up) over the same span:
  what a run has even where its samples are unknown.
- **time to accuracy** (s): the training clock (``t_worker``: the worker's own clock,
  0 right before its first training step, so python/torch start-up and the rendezvous are
  not in it) of the earliest row whose ``accuracy`` is at least the target. A row's
  accuracy is that of the evaluation run after its step; ``t_worker`` is the end of that
  step, so the evaluation's own time is not counted. None when never reached or no target.
- **final accuracy**: the accuracy of the last evaluated row; **final loss** likewise.
- **overruns**: under an emulated accelerator, the share of training steps (after each
  rank's first) whose real work did not fit the profiled time (:func:`overruns`).

``t`` is the launch clock (wall time since the run's workers were started, shared with
events.csv); ``t_worker`` is the training clock. A row without ``t_worker`` (an old
steps.csv) uses ``t`` for both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

Row = Mapping[str, Any]


def num(v: Any) -> float | None:
    """A finite number as float, else None (NaN from a table's empty cell included)."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _first_rank(rows: list[Row]) -> float | None:
    ranks = [r for r in (num(row.get("rank")) for row in rows) if r is not None]
    return min(ranks) if ranks else None


def _is_step(kind: Any) -> bool:
    """A row's ``kind`` (when a steps.csv has one): empty or ``step`` for a training step."""
    return not isinstance(kind, str) or kind == "step"


def training_steps(rows: Iterable[Row]) -> list[Row]:
    """Rank 0's training-step rows (rows with ``t`` and ``samples``; evaluation-only rows
    have no samples), in time order."""
    rows = [r for r in rows if num(r.get("t")) is not None and num(r.get("samples")) is not None
            and _is_step(r.get("kind"))]
    first = _first_rank(rows)
    mine = [r for r in rows if num(r.get("rank")) == first]
    return sorted(mine, key=lambda r: num(r.get("t")) or 0.0)


def train_clock(row: Row) -> float | None:
    """The row's training-clock time: ``t_worker``, else ``t`` (module doc)."""
    t = num(row.get("t_worker"))
    return t if t is not None else num(row.get("t"))


def evaluations(rows: Iterable[Row]) -> list[Row]:
    """Rank 0's evaluated rows (every rank logs the same global accuracy), by training
    clock."""
    rows = [r for r in rows if num(r.get("accuracy")) is not None]
    first = _first_rank(rows)
    mine = [r for r in rows if num(r.get("rank")) == first]
    return sorted(mine, key=lambda r: train_clock(r) or 0.0)


def steady_steps(rows: Iterable[Row]) -> list[Row]:
    """Rank 0's training steps without those its method marked as warm-up and, where at
    least two steps remain, without DDP's start-up (module doc)."""
    return _steady(training_steps(rows))


def _steady(steps: list[Row]) -> list[Row]:
    """``steps`` (one rank's, in order) without the warm-up and, where two remain, the
    start-up."""
    steps = [r for r in steps if not num(r.get("warmup"))]
    settled = [r for r in steps if not num(r.get("startup"))]
    return settled if len(settled) >= 2 else steps


def throughput(rows: Iterable[Row]) -> float | None:
    """Samples/s of the training steps after the first and the method's warm-up (module
    doc)."""
    steps = steady_steps(rows)
    if len(steps) < 2:
        return None
    span = num(steps[-1]["t"]) - num(steps[0]["t"])  # type: ignore[operator]
    samples = sum(num(r["samples"]) or 0.0 for r in steps[1:])
    return samples / span if span > 0 and samples > 0 else None


def steps_per_s(rows: Iterable[Row]) -> float | None:
    """Training steps/s after the first and the method's warm-up (module doc)."""
    steps = steady_steps(rows)
    span = train_span_s(steps)
    return (len(steps) - 1) / span if span else None


def train_span_s(rows: Iterable[Row]) -> float | None:
    """The time throughput divides by: end of the first steady step to end of the last."""
    steps = steady_steps(rows)
    if len(steps) < 2:
        return None
    span = num(steps[-1]["t"]) - num(steps[0]["t"])  # type: ignore[operator]
    return span if span > 0 else None


def time_to_accuracy(rows: Iterable[Row], target: float | None) -> float | None:
    """Training-clock seconds to the first evaluation at or above ``target`` (module doc)."""
    if target is None:
        return None
    for r in evaluations(rows):
        if (num(r.get("accuracy")) or -math.inf) >= target:
            return train_clock(r)
    return None


def final_accuracy(rows: Iterable[Row]) -> float | None:
    ev = evaluations(rows)
    return num(ev[-1].get("accuracy")) if ev else None


def final_loss(rows: Iterable[Row]) -> float | None:
    ev = evaluations(rows)
    return num(ev[-1].get("loss")) if ev else None


def overruns(rows: Iterable[Row]) -> dict[str, Any] | None:
    """The emulated accelerator's overruns: steps whose real work did not fit the profiled
    slot (``pace_overrun`` 1; ``netsenseml.accelerator``), of the steps throughput counts
    on every rank (after its warm-up, its start-up and its first steady step, as for
    throughput). None for a native run (no column).

    ``steps``: overrun steps of all ranks; ``of``: steps counted; ``share``: their ratio;
    ``per_rank``: the overrun steps of each rank; ``late_s_max``: the largest lateness;
    ``late_share``: what the lateness added to the training time, the most of any rank
    (its steps' ``pace_late_s`` summed over its ``step_s`` summed). A late step ends at
    most its lateness after its slot (deadlines count from the step's start, lateness is
    not carried), so ``late_share`` bounds the error the host put into the run's times:
    many steps a few microseconds late (a host's jitter) cost nothing, one stall of a
    second costs much -- which a share of steps cannot tell apart.
    """
    per_rank: dict[int, list[Row]] = {}
    for r in rows:
        rank = num(r.get("rank"))
        if rank is None or num(r.get("pace_overrun")) is None or num(r.get("samples")) is None:
            continue
        per_rank.setdefault(int(rank), []).append(r)
    if not per_rank:
        return None
    counted = {rank: _steady(sorted(rs, key=lambda r: num(r.get("step")) or 0))[1:]
               for rank, rs in sorted(per_rank.items())}
    over = {rank: sum(1 for r in rs if num(r.get("pace_overrun"))) for rank, rs in counted.items()}
    n = sum(len(rs) for rs in counted.values())
    late = {rank: [num(r.get("pace_late_s")) or 0.0 for r in rs] for rank, rs in counted.items()}
    spent = {rank: sum(num(r.get("step_s")) or 0.0 for r in rs) for rank, rs in counted.items()}
    shares = [sum(late[rank]) / spent[rank] for rank in counted if spent[rank] > 0]
    late_all = [x for xs in late.values() for x in xs]
    return {"steps": sum(over.values()), "of": n,
            "share": round(sum(over.values()) / n, 5) if n else None,
            "per_rank": [over[r] for r in sorted(over)],
            "late_s_max": round(max(late_all), 6) if late_all else None,
            "late_share": round(max(shares), 5) if shares else None}
