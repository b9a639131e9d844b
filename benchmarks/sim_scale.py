"""How long one 1024-worker prediction takes: one method, one worker count, congested fat-tree.

    .venv/bin/python benchmarks/sim_scale.py [--method allreduce] [--workers 1024]
        [--calibration results/simulation/simcal.json] [--steps 30] [--repeat 3]

Prints the wall time of ``scale.predict`` for one point (the process start, the platform
build, the simulated steps, the result's trip back), the median over ``--repeat`` tries,
and the simulation's own clock (``sim_wall_s``: inside the child, without process start).
Target: under 60 s on the 2-core build machine. The calibration is the committed fit of
``results/simulation/README.md``; any fit of the same workload times the same.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from testbed.simulation.calibrate import load_calibration
from testbed.simulation.scale import predict

ROOT = Path(__file__).resolve().parent.parent
SIM_STAR = {"kind": "star", "n_workers": 2, "n_cross": 1, "rate_mbit": 20.0,
            "queue_pkts": 100}  # testbed/scenarios/sim-star.yaml's topology


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", default="allreduce")
    ap.add_argument("--workers", type=int, default=1024)
    ap.add_argument("--calibration", type=Path,
                    default=ROOT / "results/simulation/simcal.json")
    ap.add_argument("--fabric", default="fattree", choices=["fattree", "dragonfly"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cal = load_calibration(a.calibration)
    walls, inside = [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        row, = predict(cal, SIM_STAR, [a.method], [a.workers], fabric=a.fabric,
                       steps=a.steps, parallel=1)
        walls.append(time.perf_counter() - t0)
        inside.append(row["sim_wall_s"])
    print(f"{a.method} on a congested {a.fabric} of {a.workers} workers, {a.steps} steps: "
          f"{statistics.median(walls):.2f} s wall (median of {a.repeat}: "
          f"{', '.join(f'{w:.2f}' for w in walls)}), {statistics.median(inside):.2f} s "
          f"inside the simulation; step {row['step_s']:.4g} s, level {row['level']}")


if __name__ == "__main__":
    main()
