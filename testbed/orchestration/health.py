"""Health of a run beyond its exit codes: did it learn, and is there room to record it.

Why: a run can exit cleanly and still be worthless. A codec whose payload aliases its input
zeroes every gradient; the workers finish, every file is written, and the status said
``ok`` at a tenth of the accuracy. The worker refuses the plainly broken cases itself
(``workloads.train``: a NaN/inf loss or gradient is ``diverged at step N``, an exactly zero
reduced gradient for the first steps is ``not learning``); this module judges the trend,
from the records alone: the held-out loss of every evaluation against the loss of the
untrained model (the mean of the first training steps' losses). A run whose loss did not
fall by ``MIN_DROP`` at any of them did not learn, whatever its allreduce twin would have
done. Runs too short to tell (fewer than ``K`` evaluations) are not judged. The whole run
is judged, not its first evaluations: the verdict is made after the run, and a method that
starts slowly (DGC's warm-up, top-k's error feedback filling) may fall by under
``MIN_DROP`` in its first three evaluations and still reach the target.

Free space: a run folder's size is known well enough from the scenario (per step and rank
a step record and a steps.csv row, the 10 Hz bottleneck samples, fixed files), so a run or
a sweep's next run is refused up front when the results filesystem cannot hold it, instead
of failing half-way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from testbed.common import files

#: Evaluations a run needs to be judged, and the least relative fall of its best held-out
#: loss below the untrained model's. Five, not three: top-k 0.01 on 4 workers (a 3 s
#: throughput run of the crossover sweep) and DGC's warm-up fall by under 2 % in their
#: first three evaluations and then learn.
K = 5
MIN_DROP = 0.02
#: Training steps whose mean loss stands for the untrained model.
FIRST_STEPS = 5

#: Bytes of one rank's step: its JSONL record (~560 B) and its steps.csv row (~270 B).
STEP_BYTES = 900
#: Fixed files (config, summaries, logs, events, link.csv) and slack.
FIXED_BYTES = 256 * 1024
#: bottleneck.csv per second (10 Hz x ~100 B x a few watched ends).
SAMPLE_BYTES_PER_S = 4 * 1024
#: Steps per second assumed for a time-limited run (the tiny models' fastest).
FAST_STEPS_PER_S = 20.0
#: Safety factor over the estimate.
MARGIN = 2.0


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def learning(recs: dict[int, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The ``learning`` block of summary.json, or None when the run is too short to judge."""
    first: list[float] = []
    for rank_recs in recs.values():
        losses = [r["loss"] for r in rank_recs if r.get("kind") == "step" and _finite(r.get("loss"))]
        first += losses[:FIRST_STEPS]
    rank0 = recs.get(0, [])
    evals = [float(r["loss"]) for r in rank0 if r.get("kind") == "eval" and _finite(r.get("loss"))]
    if not first or len(evals) < K:
        return None
    start = sum(first) / len(first)
    best = min(evals)
    ok = best <= start * (1 - MIN_DROP)
    out: dict[str, Any] = {"ok": ok, "initial_loss": round(start, 5),
                           "eval_losses": [round(v, 5) for v in evals[:K]],
                           "best_eval_loss": round(best, 5), "evaluations": len(evals)}
    if not ok:
        shown = ", ".join(f"{v:.4g}" for v in evals[:K]) + (", ..." if len(evals) > K else "")
        out["why"] = (f"held-out loss ({shown}; best {best:.4g} in {len(evals)} "
                      f"evaluations) never fell {MIN_DROP:.0%} below the untrained "
                      f"model's {start:.4g}")
    return out


def estimate_run_bytes(scenario: Any) -> int:
    """Bytes a run folder of ``scenario`` is expected to take (module doc), with margin."""
    wl = scenario.workload
    seconds = wl.time_limit_s
    steps = wl.steps
    if steps is None:
        steps = int((seconds or 60.0) * FAST_STEPS_PER_S)
    if seconds is None:
        seconds = steps / FAST_STEPS_PER_S
    size = (FIXED_BYTES + scenario.world_size * steps * STEP_BYTES
            + seconds * SAMPLE_BYTES_PER_S)
    return int(size * MARGIN)


def check_space(run_dir: Path, scenario: Any) -> None:
    """Raise files.NotEnoughSpace when the filesystem of ``run_dir`` cannot hold the run."""
    need = estimate_run_bytes(scenario)
    free = files.free_bytes(run_dir)
    if free is not None and free < need:
        raise files.NotEnoughSpace(Path(run_dir).parent, need)
