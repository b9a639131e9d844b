"""The paced simulation against every paced emulated run of a results tree (issue 52, part 2).

    .venv/bin/python benchmarks/sim_paper_grid.py [RUNS] [--only TEXT] [--workers N]
        [--out results/simulation]

Reads every run folder under ``RUNS`` (default ``results/runs/paper-grid``: whatever part
of the paper grid has been run), simulates each from its own ``config.json`` (the profile's
compute and codec times, DDP's bucket layout, each method's wire sizes and policy, the
rate, k; ``testbed/simulation/paced.py``: nothing fitted) and prints one row per point:
emulated and simulated samples/s, the error, the real rate the emulated link ran at
(rate / k), how busy the emulated link was (``bottleneck.csv``) and, for the adaptive
methods, the share of the run's time the simulated policy chose the run's level. Then
the median and worst |error| over all points, and split at the real rate from which the
emulation is faithful (300 Mbit/s) for runs whose hosts were not on the default CUBIC, and by the hosts' TCP. Targets (issue 52):
median <= 5 %, worst <= 10 %. ``--out`` writes ``paper-grid-validation.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.common.provenance import git_commit  # noqa: E402
from testbed.simulation import paced_validation as pv  # noqa: E402

TARGET_MEDIAN, TARGET_WORST = 5.0, 10.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default="results/runs/paper-grid",
                    help="a results tree of paced runs (default: %(default)s)")
    ap.add_argument("--only", default=None, help="only run folders whose path contains this")
    ap.add_argument("--workers", type=int, default=1, help="simulations at once (processes)")
    ap.add_argument("--out", default=None, help="write paper-grid-validation.csv/.md here")
    args = ap.parse_args(argv)
    root = Path(args.runs)
    if not root.is_dir():
        print(f"error: {root} is not a folder", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    points, skipped = pv.validate(root, args.workers, args.only)
    if not points:
        print(f"error: no paced run under {root}" + (f" matching {args.only!r}" if args.only
                                                      else ""), file=sys.stderr)
        return 2
    print("\n".join(pv.table(points)))
    print()
    print("\n".join(pv.summary(points)))
    for s in skipped:
        print(f"left out: {s}")
    print(f"targets: median <= {TARGET_MEDIAN:g} %, worst <= {TARGET_WORST:g} %; "
          f"{len(points)} simulations in {time.perf_counter() - t0:.1f} s")
    if args.out:
        pv.write(points, skipped, Path(args.out), args.runs, git_commit(
            exclude=("results/simulation/paper-grid-validation.*",)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
