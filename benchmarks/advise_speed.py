"""How long ``netsense advise`` takes to answer.

    .venv/bin/python benchmarks/advise_speed.py [--workers 8,64,1024] [--repeat 3]
        [--rate 1000] [--models M,M,...]

**Speed** (target: <= 10 s for any built-in model up to 1024 workers): the wall time of
the whole command as a user runs it (``netsense advise MODEL -w W --rate R`` in a fresh
process: the interpreter's start, the imports, every method, the crossover search over
rates), for every model the shipped profile has an entry for (or the ``--models`` named),
median and worst of ``--repeat`` tries.

How its closed form compares with the emulated runs (the paper grid's, or the earlier
paper-scale runs its goodput share was fitted on): ``benchmarks/advise_validation.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from netsenseml import accelerator
from testbed.simulation import advise as adv

ROOT = Path(__file__).resolve().parent.parent
NETSENSE = Path(sys.executable).parent / "netsense"
TARGET_S = 10.0


def speed(workers: list[int], rate: float, repeat: int, only: list[str] | None = None) -> None:
    models = sorted({e.model for e in accelerator.load(adv.DEFAULT_PROFILE).entries})
    if only:
        unknown = sorted(set(only) - set(models))
        if unknown:
            sys.exit(f"error: --models: {', '.join(unknown)} not in the shipped profile "
                     f"(accepted: {', '.join(models)})")
        models = [m for m in models if m in only]
    print("| model | workers | median s | worst s | tries |")
    print("|---|---|---|---|---|")
    worst_all = 0.0
    for model in models:
        for w in workers:
            walls = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                subprocess.run([str(NETSENSE), "advise", model, "-w", str(w), "--rate",
                                f"{rate:g}"], check=True, capture_output=True, text=True)
                walls.append(time.perf_counter() - t0)
            worst_all = max(worst_all, max(walls))
            print(f"| {model} | {w} | {statistics.median(walls):.2f} | {max(walls):.2f} | "
                  f"{', '.join(f'{x:.2f}' for x in walls)} |")
    print(f"\nworst answer {worst_all:.2f} s; target <= {TARGET_S:g} s: "
          f"{'met' if worst_all <= TARGET_S else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="8,64,1024")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", help="only these models (default: every one the profile has)")
    a = ap.parse_args()
    speed([int(w) for w in a.workers.split(",")], a.rate, a.repeat,
          a.models.split(",") if a.models else None)


if __name__ == "__main__":
    main()
