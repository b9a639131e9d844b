"""``netsense convergence``: steps to the target per ladder level, for a scenario's workload.

Why on loopback: steps to accuracy are a property of the model, the data, the global batch
and the target, not of the network (a level changes what is sent, and loopback sends it
exactly as the emulated link would, only faster). So the scenario's workload is trained
with every level of the ladder (``netsenseml.convergence.calibrate_levels``), as many
ranks as the scenario's topology has workers (the global batch decides the steps), gloo on
``lo``, one process per rank, ``--stop-at-target`` and a step cap; a run that reaches the
cap has not reached the target and is written as ``null`` (the loader counts it as the cap,
a lower bound), never as a made-up number.

Each run keeps its folder under the work folder (``<results>/calibrate/<scenario>/runs``)
and a finished one is not repeated, so an interrupted calibration resumes. The table
(format: ``netsenseml.convergence``) is written atomically to ``--out``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from netsenseml import convergence, methods
from testbed.common.files import write_json
from testbed.common.ports import free_port
from testbed.config.scenario import Scenario, ScenarioError, apply_overrides
from testbed.orchestration.workers import REPO_ROOT, worker_argv
from workloads import records

DEFAULT_MAX_STEPS = 1500


class CalibrateError(ValueError):
    """Bad input to ``netsense convergence``; ``str()`` is one line."""


class RunFailed(RuntimeError):
    """A calibration run that did not finish; ``str()`` is one line naming its log."""


def training_scenario(scn: Scenario, max_steps: int) -> Scenario:
    """The scenario's workload as a step-capped run that stops at its target."""
    wl = scn.workload
    if wl.target_accuracy is None or not wl.eval_every:
        raise CalibrateError(f"scenario {scn.name}: calibration needs workload.target_accuracy "
                             "and workload.eval_every (steps to a target)")
    try:
        return apply_overrides(scn, {"workload.steps": max_steps,
                                     "workload.args.stop_at_target": True,
                                     "workload.backend": "gloo", "workload.device": "cpu"})
    except ScenarioError as exc:
        raise CalibrateError(str(exc)) from None


def run_one(scn: Scenario, spec: methods.MethodSpec, seed: int, folder: Path,
            timeout_s: float) -> list[int | None]:
    """One loopback run of ``spec``: ``world`` ranks, logs in ``folder``; exit codes.

    Every rank is killed by its PID if the run overruns ``timeout_s``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    world = scn.world_size
    argv = worker_argv(scn, spec, seed, folder, device="cpu", backend="gloo")
    port = free_port()
    procs = []
    try:
        for rank in range(world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world),
                       GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS=str(scn.workload.threads))
            with open(folder / f"rank{rank}.out", "w") as out:
                procs.append(subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out,
                                              stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout_s
        codes: list[int | None] = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def read_run(folder: Path) -> dict[str, Any] | None:
    """A finished run's rank 0 (``rank0.jsonl``, read as ``workloads.records``), else None
    (no file, a torn line, no ``ok`` summary): ``steps`` to the target (None: not reached),
    ``reached``, ``steps_run``, ``step_ms`` (median), ``train_s`` (first step to the
    evaluation that reached the target, less the evaluations before it), ``params``,
    ``grad_bytes``, ``final_accuracy``. The one reader of such runs (``netsense convergence``
    and ``benchmarks/convergence.py``)."""
    path = folder / "rank0.jsonl"
    if not path.is_file():
        return None
    raw = []
    for line in path.read_text().splitlines():
        try:
            raw.append(json.loads(line))
        except json.JSONDecodeError:
            return None  # a torn last line: the run did not finish
    recs = records.RankRecords.parse(raw)
    summary = recs.summary
    if summary is None or summary.status != "ok":
        return None
    hit = next((e for e in recs.evals if e.reached_target), None)
    steps = [r.step_s for r in recs.steps if r.step_s is not None]
    train_s = None
    if hit is not None and hit.t is not None:
        before = sum(e.eval_s or 0.0 for e in recs.evals if (e.step or 0) < (hit.step or 0))
        train_s = hit.t - (hit.eval_s or 0.0) - before
    start = recs.start
    return {"steps": int(hit.step) if hit is not None and hit.step is not None else None,
            "reached": hit is not None, "steps_run": int(summary.steps or 0),
            "step_ms": round(1e3 * statistics.median(steps), 2) if steps else None,
            "train_s": train_s, "params": start.params if start else None,
            "grad_bytes": start.grad_bytes if start else None,
            "final_accuracy": summary.final_accuracy}


def check(scn: Scenario, seeds: Sequence[int], levels: Sequence[str] | None,
          max_steps: int) -> tuple[Scenario, tuple[str, ...]]:
    """The step-capped training scenario and the levels; CalibrateError on bad input."""
    if not seeds:
        raise CalibrateError("--seeds: need at least one seed")
    levels = tuple(levels) if levels else convergence.calibrate_levels()
    for key in levels:
        try:
            written = convergence.level_method(key).level_key
            if written != key:
                raise convergence.ConvergenceError(f"write {key!r} as {written!r}")
        except ValueError as exc:
            raise CalibrateError(f"--levels: {key}: {exc}") from None
    if "none" not in levels:
        raise CalibrateError("--levels: need 'none' (allreduce), the base of every factor")
    return training_scenario(scn, max_steps), levels


def calibrate(scn: Scenario, *, out: Path, work: Path, seeds: Sequence[int],
              levels: Sequence[str] | None = None, max_steps: int = DEFAULT_MAX_STEPS,
              timeout_s: float = 900.0, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs what is missing, writes the table to ``out`` and returns it."""
    train, levels = check(scn, seeds, levels, max_steps)
    rows: dict[str, Any] = {}
    for key in levels:
        spec = convergence.level_method(key)
        runs = []
        for seed in seeds:
            folder = work / f"{key.replace(':', '-')}-s{seed}"
            r = read_run(folder)
            if r is None:
                t0 = time.monotonic()
                codes = run_one(train, spec, seed, folder, timeout_s)
                r = read_run(folder)
                if r is None:
                    tail = (folder / "rank0.out").read_text()[-300:] if (folder / "rank0.out").is_file() else ""
                    raise RunFailed(f"{spec} seed {seed}: the run failed (exit codes "
                                    f"{codes}; {folder}/rank0.out): {' '.join(tail.split())}")
                got = f"{r['steps']} steps" if r["steps"] else f"not reached in {r['steps_run']} steps"
                say(f"  {key:<12} seed {seed}: {got} ({time.monotonic() - t0:.0f} s)")
            runs.append(r)
        steps = [r["steps"] for r in runs]
        rows[key] = {"method": str(spec), "steps": steps,
                     "reached": sum(s is not None for s in steps), "runs": len(steps),
                     "step_ms": [r["step_ms"] for r in runs]}
    wl = train.workload
    table: dict[str, Any] = {
        "format": convergence.FORMAT,
        "scenario": scn.name,
        "workload": {"model": wl.model, "dataset": wl.dataset, "batch_size": wl.batch_size,
                     "target_accuracy": wl.target_accuracy, "eval_every": wl.eval_every,
                     "lr": wl.lr, "args": {k: v for k, v in wl.args.items()
                                           if k not in ("stop_at_target", "stop-at-target")}},
        "world_size": scn.world_size,
        "seeds": list(seeds),
        "max_steps": max_steps,
        "levels": rows,
    }
    prior = convergence.from_table(table, source=str(out))
    table["factors"] = {k: round(prior.factor(*methods.split_level(k)), 4) for k in levels}
    table["resolution"] = round(prior.resolution, 4)
    write_json(out, table)
    return table


def markdown(table: dict[str, Any]) -> str:
    """The table as printed by the command (and pasted into notes)."""
    lines = ["| level | steps per seed | reached | factor c |", "| --- | --- | --- | --- |"]
    for key, row in table["levels"].items():
        steps = ", ".join("-" if s is None else str(s) for s in row["steps"])
        lines.append(f"| {key} | {steps} | {row['reached']}/{row['runs']} | {table['factors'][key]:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - use `netsense convergence`
    sys.exit("use: netsense convergence SCENARIO")
