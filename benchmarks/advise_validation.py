"""``netsense advise``'s closed form against every emulated run of a results tree: the table
its stated uncertainty per method family comes from.

    .venv/bin/python benchmarks/advise_validation.py [RUNS] [--only TEXT]
        [--out results/simulation]

Reads every run folder under ``RUNS`` (default ``results/runs/paper-grid``: whatever models,
topologies and rates the paper grid holds so far), predicts each run's configuration (its
model, workers, topology, rate, method, the timing it was paced by) with advise's closed
form (``testbed/simulation/advise_validation.py``), and prints one row per run (measured and
predicted samples/s, the error), after the spreads per model and method family (dense
allreduce, all-gather, low rank, adaptive: the median and worst |error|; the worst is what
``netsense advise`` states as the family's uncertainty), then the runs left out and why
(degraded runs among them). Nothing is fitted to these runs. ``--out`` writes ``advise-validation.csv``
(read by ``netsense advise`` at run time) and ``advise-validation.md``; a test holds the
committed CSV to what this computes from the committed runs, so a tree that gained runs
fails it until this is run again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.simulation import advise_validation as av  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default="results/runs/paper-grid",
                    help="a results tree of paced runs (default: %(default)s)")
    ap.add_argument("--only", default=None, help="only run folders whose path contains this")
    ap.add_argument("--out", default=None, help="write advise-validation.csv/.md here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    pts, left = av.points(Path(args.runs), args.only)
    if not pts:  # a folder that is not there holds none
        print(f"error: no run under {args.runs} advise can be checked on"
              + (f" matching {args.only!r}" if args.only else ""), file=sys.stderr)
        return 2
    print("\n".join(av.report(pts, left)))
    print(f"\n{len(pts)} runs predicted in {time.perf_counter() - t0:.1f} s")
    if args.out:
        av.write(pts, left, Path(args.out), args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
