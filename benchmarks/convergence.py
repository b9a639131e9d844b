"""Steps and seconds each method needs to reach a workload's target: the convergence table.

Why: an evaluation can only show when adapting compression pays if compression *costs*
something; this table shows, without any emulated network, what each method costs in
convergence on a workload (steps to the target, relative to allreduce) and in compute
(step time on loopback, where the network is nearly free).

Each run is real: two ``python -m workloads.train`` ranks, gloo on loopback, one torch
thread each, ``--stop-at-target`` and a step cap (a run that hits the cap has not reached
the target and is counted as such, never given a made-up number of steps).

    .venv/bin/python benchmarks/convergence.py [--workload mixture] [--seeds 0,1,2]
        [--methods allreduce,fp16,...] [--out DIR] [--table-only]
    .venv/bin/python benchmarks/convergence.py --priors

``--priors`` prints, without training, the policy's convergence prior ``c(d)`` per level
(``netsenseml.convergence``): the stated default, or the table ``--convergence PATH``
names; top-k's between the table's points as the policy interpolates them.

Runs are kept under ``--out`` (default ``results/bench-convergence/<workload>/``) and a
finished run is not repeated, so the table can be built in several sittings (``--seeds 0``,
then ``--seeds 1``, ...) and reprinted with ``--table-only``. Columns:

- ``reached``: runs that reached the target / runs.
- ``steps``: steps to the first evaluation at or above the target; mean +- sample standard
  deviation over the seeds that reached it, and the range. Resolution: ``eval_every``.
- ``x ar``: mean steps relative to allreduce's mean steps.
- ``train s``: seconds from the first step to that evaluation, minus the time spent in
  evaluations before it (every method evaluates equally often per step, but a slower step
  would otherwise look cheaper per evaluation).
- ``step ms``: median step time of rank 0 (compute + hook + loopback communication).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.common.ports import free_port
from testbed.orchestration.convergence_table import read_run  # the one reader of such runs

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    model: str
    dataset: str
    knobs: dict[str, int]
    target: float
    eval_every: int
    max_steps: int
    batch_size: int = 32
    note: str = ""


WORKLOADS: dict[str, Workload] = {
    # the default evaluation workload (see workloads/README.md)
    "mixture": Workload("mlp", "mixture", {"width": 2048}, 0.95, 20, 1500,
                        note="5.3 M params, 21 MB gradient"),
    # the large one: top-k's own compute is visible next to the step
    "mixture-large": Workload("mlp", "mixture", {"width": 3072}, 0.95, 20, 1500,
                              note="11.2 M params, 45 MB gradient"),
    # the eval sweep's workload (testbed/sweeps/eval.yaml): a gradient that this shared
    # 2-core machine can push through an emulated link ~20 times a second
    "mixture-512": Workload("mlp", "mixture", {"width": 512}, 0.85, 20, 1500, batch_size=64,
                            note="0.55 M params, 2.2 MB gradient"),
    # the crossover sweep's workload (testbed/sweeps/crossover.yaml): 4x the batch of
    # mixture-512, so compute per step grows and the gradient does not
    "mixture-512-b256": Workload("mlp", "mixture", {"width": 512}, 0.95, 20, 1500,
                                 batch_size=256, note="0.55 M params, 2.2 MB gradient"),
    # the old default, for comparison
    "digits": Workload("mlp", "digits", {"width": 480}, 0.75, 4, 400,
                       note="the paper-quick workload"),
}
METHODS = ("allreduce", "fp16", "int8", "topk:0.1", "topk:0.01", "topk:0.001", "dgc:0.01",
           "dgc:0.001", "randomk:0.01", "powersgd:4")


def run_one(wl: Workload, method: str, seed: int, folder: Path, timeout: float) -> None:
    """Two ranks on loopback; their logs go to ``folder``. Kills (by PID) what overruns."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [sys.executable, "-m", "workloads.train", "--model", wl.model, "--dataset",
            wl.dataset, "--method", method, "--steps", str(wl.max_steps), "--batch-size",
            str(wl.batch_size), "--seed", str(seed), "--log-dir", str(folder),
            "--eval-every", str(wl.eval_every), "--target-accuracy", str(wl.target),
            "--stop-at-target", "--model-args",
            ",".join(f"{k}={v}" for k, v in wl.knobs.items())]
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        with open(folder / f"rank{rank}.out", "w") as out:
            procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=out,
                                          stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        codes = [None, None]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if codes != [0, 0]:
        tail = (folder / "rank0.out").read_text()[-400:]
        print(f"  {method} seed {seed}: exit codes {codes}; rank 0 said: {tail}", flush=True)


def _stat(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:{fmt}} +- {sd:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def table(name: str, wl: Workload, out: Path, methods: list[str], seeds: list[int]) -> str:
    rows, csv_rows, info = [], [], None
    base = None
    for method in methods:
        runs = {s: read_run(out / f"{method.replace(':', '-')}-s{s}") for s in seeds}
        done = [r for r in runs.values() if r is not None]
        info = info or (done[0] if done else None)
        hit = [r for r in done if r["reached"]]
        steps = [r["steps"] for r in hit]
        mean_steps = statistics.fmean(steps) if steps else math.nan
        if method == "allreduce":
            base = mean_steps
        ratio = mean_steps / base if base and steps else math.nan
        rows.append((method, f"{len(hit)}/{len(done)}", _stat(steps, ".0f"),
                     "-" if math.isnan(ratio) else f"{ratio:.2f}",
                     _stat([r["train_s"] for r in hit], ".1f"),
                     f"{statistics.median(r['step_ms'] for r in done):.0f}" if done else "-"))
        for s, r in runs.items():
            if r is not None:
                csv_rows.append({"workload": name, "method": method, "seed": s, **r})
    with open(out / "runs.csv", "w", newline="") as fh:
        if csv_rows:
            w = csv.DictWriter(fh, fieldnames=list(csv_rows[0]))
            w.writeheader()
            w.writerows(csv_rows)
    head = (f"workload {name}: {wl.model} {wl.knobs} on {wl.dataset}"
            + (f", {info['params'] / 1e6:.2f} M params, {info['grad_bytes'] / 1e6:.1f} MB"
               if info else "")
            + f"; target {wl.target} every {wl.eval_every} steps, cap {wl.max_steps} steps; "
              f"2 ranks on loopback, batch {wl.batch_size}/rank; seeds {seeds}")
    widths = [12, 8, 26, 6, 26, 8]
    titles = ("method", "reached", "steps mean +- sd (range)", "x ar",
              "train s mean +- sd (range)", "step ms")
    lines = [head, "  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def priors(table: str | None = None) -> str:
    """The policy's c(d): the prior ``netsenseml.convergence.load`` gives for ``table`` (a
    table's path; None: the stated default), per level, and top-k's between its points."""
    from netsenseml import convergence  # pure Python: no torch for this

    prior = convergence.load(table)
    lines = [f"prior: {prior.source} (resolution {prior.resolution:g})",
             f"{'level':<14} {'c(d)':>7}"]
    lines += [f"{level:<14} {c:>7.3f}" for level, c in prior.dense.items()]
    points = {r for r, _ in prior.topk}
    for r in sorted(points | {0.05, 0.02, 0.005, 0.002}, reverse=True):
        mark = "" if r in points else "  (interpolated)"
        lines.append(f"{f'topk:{r:g}':<14} {prior.factor('topk', r):>7.3f}{mark}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="mixture", choices=list(WORKLOADS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", help="default results/bench-convergence/<workload>")
    ap.add_argument("--table-only", action="store_true", help="print from finished runs")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--priors", action="store_true",
                    help="print the policy's convergence prior c(d) per level and exit")
    ap.add_argument("--convergence", help="--priors of this convergence table (default: the stated default)")
    a = ap.parse_args()
    if a.priors:
        print(priors(a.convergence))
        return
    wl = WORKLOADS[a.workload]
    methods = [m for m in a.methods.split(",") if m]
    seeds = [int(s) for s in a.seeds.split(",") if s]
    out = Path(a.out) if a.out else REPO / "results" / "bench-convergence" / a.workload
    out.mkdir(parents=True, exist_ok=True)
    if not a.table_only:
        for seed in seeds:
            for method in methods:
                folder = out / f"{method.replace(':', '-')}-s{seed}"
                if read_run(folder) is not None:
                    continue
                t0 = time.monotonic()
                run_one(wl, method, seed, folder, a.timeout)
                r = read_run(folder)
                got = (f"steps {r['steps']}" if r and r["reached"] else
                       f"not reached in {r['steps_run']} steps" if r else "failed")
                print(f"  {method} seed {seed}: {got} ({time.monotonic() - t0:.0f} s)",
                      flush=True)
    all_seeds = sorted({int(p.name.rsplit("-s", 1)[1]) for p in out.iterdir()
                        if p.is_dir() and "-s" in p.name} | set(seeds))
    print(table(a.workload, wl, out, methods, all_seeds))


if __name__ == "__main__":
    main()
