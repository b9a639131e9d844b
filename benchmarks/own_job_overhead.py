"""Per-run overhead of an own job (a scenario's ``workload.command``) against the built-in
worker's, on the same emulated 2-worker star, the same number of steps.

    flock /tmp/netsense-heavy.lock .venv/bin/python benchmarks/own_job_overhead.py [--runs N] [--steps S]

Prints, per kind of run, the median over N runs of ``wall_s`` (the run, build to teardown),
``overhead_s`` (``wall_s`` minus rank 0's training clock) and the phases that make it up
(summary.json ``phases_s``). Kinds: the built-in worker forked from the pre-imported zygote
(what ``netsense run`` does), the built-in worker as a fresh process (``NETSENSE_ZYGOTE=0``:
it pays its imports, as any fresh interpreter does) and an own job
(``tests/jobs/tiny_job.py``, always a fresh interpreter: the zygote holds the built-in
worker, not the user's script). An own job's ``job_setup`` phase is everything before its
``hooks.register`` (interpreter start, imports, data, model, init_process_group, DDP).
Needs root; the numbers are printed, not asserted. Default 1 run of 10 steps each: a smoke
size; use ``--runs 5`` for numbers worth quoting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "jobs" / "tiny_job.py"


def scenario(kind: str, steps: int) -> Any:
    from testbed.config.scenario import validate_scenario

    workload: dict[str, Any] = ({"command": ["python", str(JOB), "--steps", str(steps)]}
                                if kind == "own job" else {"model": "mlp", "steps": steps})
    return validate_scenario({
        "name": "own-job-overhead", "topology": {"kind": "star", "n_workers": 2,
                                                 "rate_mbit": 100},
        "workload": workload, "methods": ["allreduce"], "timeout_s": 300})


def measure(kind: str, steps: int, runs: int, root: Path) -> list[dict[str, Any]]:
    from testbed.orchestration import launcher
    from testbed.orchestration.run import run_scenario

    out = []
    scn = scenario(kind, steps)
    old = os.environ.get("NETSENSE_ZYGOTE")
    if kind == "built-in, fresh process":
        os.environ["NETSENSE_ZYGOTE"] = "0"
    try:
        with launcher.shared():
            if kind == "built-in, zygote" and launcher.current() is not None:
                launcher.current().wait_ready()  # its imports are paid once per sweep
            for i in range(runs):
                o = run_scenario(scn, "allreduce", i, root / f"{kind}-{i}".replace(" ", "_")
                                 .replace(",", ""), progress=False)
                if o.status != "ok":
                    print(f"  {kind} run {i}: {o.status}: {o.summary.get('reason')}")
                    continue
                out.append(o.summary)
    finally:
        if old is None:
            os.environ.pop("NETSENSE_ZYGOTE", None)
        else:
            os.environ["NETSENSE_ZYGOTE"] = old
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1, help="runs per kind (default 1)")
    p.add_argument("--steps", type=int, default=10, help="training steps per run (default 10)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("own_job_overhead: needs root (emulated network)")
    kinds = ["built-in, zygote", "built-in, fresh process", "own job"]
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="ojo-") as tmp:
        for kind in kinds:
            results[kind] = measure(kind, args.steps, args.runs, Path(tmp))
    print(f"\n## per-run overhead, 2-worker star, {args.steps} steps, median of {args.runs}")
    print(f"{'kind':26} {'wall_s':>7} {'overhead_s':>10}  phases (s)")
    med: dict[str, float] = {}
    for kind in kinds:
        rs = results[kind]
        if not rs:
            print(f"{kind:26} (no ok run)")
            continue
        wall = statistics.median(r["wall_s"] for r in rs)
        over = statistics.median(r["overhead_s"] for r in rs if r.get("overhead_s") is not None)
        med[kind] = over
        names = sorted({k for r in rs for k in r.get("phases_s", {})})
        phases = {k: statistics.median(r["phases_s"].get(k, 0.0) for r in rs) for k in names}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in phases.items() if v >= 0.01)
        print(f"{kind:26} {wall:7.2f} {over:10.2f}  {shown}")
    if "own job" in med:
        for base in kinds[:2]:
            if base in med:
                print(f"own job - {base}: {med['own job'] - med[base]:+.2f} s")


if __name__ == "__main__":
    main()
