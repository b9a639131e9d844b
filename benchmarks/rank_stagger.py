"""How far apart the ranks of one ring finish their steps, from run folders.

    .venv/bin/python benchmarks/rank_stagger.py RUNS_DIR... [--skip-s 1.5]

Per run: the median step of rank 0 and, per rank r > 0, the median over steps of (the wall
time rank r logged step s) - (the wall time rank 0 logged it), steps after ``--skip-s``
seconds (congested runs: the streams start at 0.5 s). The simulation's ring phases end on
every rank together (a barrier); a rank that finishes its steps a fixed part of a period
after another shows the ring running as a pipeline instead: a rank whose send only has to
reach its socket goes on while its successor still waits for the bytes
(``results/simulation/README.md``).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from testbed.simulation.calibrate import load_runs


def stagger(run: Path, skip_s: float) -> tuple[float, list[float]]:
    """(rank 0's median step s, per rank r > 0 the median end offset from rank 0 in s)."""
    with open(run / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    wall = {(int(r["rank"]), int(r["step"])): float(r["wall"]) for r in rows}
    late = {int(r["step"]) for r in rows if r["rank"] == "0" and float(r["t"]) > skip_s}
    step = statistics.median(float(r["step_s"]) for r in rows
                             if r["rank"] == "0" and int(r["step"]) in late)
    ranks = sorted({k[0] for k in wall} - {0})
    offsets = [statistics.median(wall[(k, s)] - wall[(0, s)] for s in late if (k, s) in wall)
               for k in ranks]
    return step, offsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--skip-s", type=float, default=1.5)
    a = ap.parse_args()
    print("| method | W | condition | step ms | end offset of rank r vs rank 0, ms (share of the step) |")
    print("|---|---|---|---|---|")
    for root in a.runs:
        for r in load_runs(root):
            step, offs = stagger(Path(r.path), a.skip_s)
            cells = " ".join(f"{k + 1}: {o * 1e3:+.0f} ({o / step:+.0%})" for k, o in enumerate(offs))
            print(f"| {r.method} | {r.n} | {r.condition} | {step * 1e3:.0f} | {cells} |")


if __name__ == "__main__":
    main()
