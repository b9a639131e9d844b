"""Per-run overhead of an own job (a scenario's ``workload.command``) against the built-in
worker's, on the same emulated 2-worker star, the same number of steps.

    flock /tmp/netsense-heavy.lock .venv/bin/python benchmarks/own_job_overhead.py [--runs N] [--steps S] [--fresh]

The kinds of run take turns, run by run (round i runs every kind once, in an order rotated
by one each round), so that a change in the host's load reaches all of them alike. Kinds:
the built-in worker forked from the pre-imported zygote (what ``netsense run`` does), an own
job (``tests/jobs/tiny_job.py``, a user's script run by ``python``: forked from the same
zygote, ``workloads.job_runner``) and the same own job as a fresh interpreter
(``NETSENSE_ZYGOTE=0``: how every own job started before it was forked, paying torch's
imports in each rank); ``--fresh`` adds the built-in worker as a fresh process. The zygote's
imports are paid once before the first round, as once per ``netsense run`` or sweep.

Prints per kind the median over N runs of ``wall_s`` (the run, build to teardown),
``overhead_s`` (``wall_s`` minus rank 0's training clock) and the phases that make it up
(summary.json ``phases_s``; an own job's ``job_setup`` is everything before its
``hooks.register``: interpreter start or fork, imports, data, model, init_process_group,
DDP), then each kind's overhead minus the built-in worker's in the same round: the mean of
those paired differences and its 95 % t-interval (``testbed.common.stats``). Needs root;
the numbers are printed, not asserted. Default 1 round of 10 steps each: a smoke size; use
``--runs 5`` or more for numbers worth quoting.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's testbed, not an installed one
JOB = REPO / "tests" / "jobs" / "tiny_job.py"
BASE = "built-in, zygote"
#: kind -> (an own job?, NETSENSE_ZYGOTE for its runs)
KINDS = {BASE: (False, "1"), "own job": (True, "1"), "own job, fresh interpreter": (True, "0")}
FRESH = {"built-in, fresh process": (False, "0")}


def scenario(own: bool, steps: int) -> Any:
    from testbed.config.scenario import validate_scenario

    workload: dict[str, Any] = ({"command": ["python", str(JOB), "--steps", str(steps)]}
                                if own else {"model": "mlp", "steps": steps})
    return validate_scenario({
        "name": "own-job-overhead", "topology": {"kind": "star", "n_workers": 2,
                                                 "rate_mbit": 100},
        "workload": workload, "methods": ["allreduce"], "timeout_s": 300})


def one_run(kind: str, own: bool, zygote: str, steps: int, run_dir: Path
            ) -> dict[str, Any] | None:
    from testbed.orchestration.run import run_scenario

    old = os.environ.get("NETSENSE_ZYGOTE")
    os.environ["NETSENSE_ZYGOTE"] = zygote
    try:
        o = run_scenario(scenario(own, steps), "allreduce", 0, run_dir, progress=False)
    finally:
        if old is None:
            os.environ.pop("NETSENSE_ZYGOTE", None)
        else:
            os.environ["NETSENSE_ZYGOTE"] = old
    if o.status != "ok":
        print(f"  {kind}: {o.status}: {o.summary.get('reason')}", flush=True)
        return None
    return o.summary


def measure(kinds: dict[str, tuple[bool, str]], steps: int, runs: int, root: Path
            ) -> dict[str, list[dict[str, Any] | None]]:
    """Every kind once per round, the order rotated by one each round."""
    from testbed.orchestration import launcher

    names = list(kinds)
    out: dict[str, list[dict[str, Any] | None]] = {k: [] for k in names}
    with launcher.shared():
        if launcher.current() is not None:
            launcher.current().wait_ready()  # its imports are paid once per sweep
        for i in range(runs):
            for kind in names[i % len(names):] + names[:i % len(names)]:
                own, zygote = kinds[kind]
                s = one_run(kind, own, zygote, steps,
                            root / f"{i}-{kind}".replace(" ", "_").replace(",", ""))
                out[kind].append(s)
                if s is not None:
                    print(f"  round {i + 1} {kind:28} overhead {s['overhead_s']:6.2f} s  "
                          f"launcher {s.get('launcher')}", flush=True)
    return out


def report(results: dict[str, list[dict[str, Any] | None]], steps: int, runs: int) -> None:
    from testbed.common.stats import ci95

    print(f"\n## per-run overhead, 2-worker star, {steps} steps, {runs} rounds (median)")
    print(f"{'kind':28} {'wall_s':>7} {'overhead_s':>10}  phases (s)")
    for kind, all_rs in results.items():
        rs = [r for r in all_rs if r is not None]
        if not rs:
            print(f"{kind:28} (no ok run)")
            continue
        wall = statistics.median(r["wall_s"] for r in rs)
        over = statistics.median(r["overhead_s"] for r in rs if r.get("overhead_s") is not None)
        names = sorted({k for r in rs for k in r.get("phases_s", {})})
        phases = {k: statistics.median(r["phases_s"].get(k, 0.0) for r in rs) for k in names}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if v >= 0.01)
        print(f"{kind:28} {wall:7.2f} {over:10.2f}  {shown}")
    print(f"\n## overhead minus the {BASE} run's of the same round (mean, 95 % interval)")
    for kind, rs in results.items():
        if kind == BASE:
            continue
        diffs = [r["overhead_s"] - b["overhead_s"] for r, b in zip(rs, results[BASE], strict=True)
                 if r is not None and b is not None and r.get("overhead_s") is not None
                 and b.get("overhead_s") is not None]
        iv = ci95(diffs)
        half = "" if math.isnan(iv.half) else f" +- {iv.half:.2f}"
        print(f"{kind:28} {iv.mean:+.2f}{half} s  (n={iv.n})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1, help="rounds: runs per kind (default 1)")
    p.add_argument("--steps", type=int, default=10, help="training steps per run (default 10)")
    p.add_argument("--fresh", action="store_true",
                   help="also the built-in worker as a fresh process (NETSENSE_ZYGOTE=0)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("own_job_overhead: needs root (emulated network)")
    kinds = {**KINDS, **(FRESH if args.fresh else {})}
    with tempfile.TemporaryDirectory(prefix="ojo-") as tmp:
        results = measure(kinds, args.steps, args.runs, Path(tmp))
    report(results, args.steps, args.runs)


if __name__ == "__main__":
    main()
