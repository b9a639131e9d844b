"""Scale check of the orchestrator: an 8-worker star and a 4+4 dumbbell, a few steps each.

    .venv/bin/python benchmarks/run_scale.py [--out DIR]

Builds each network, runs 5 training steps with allreduce, tears everything down, and
prints build, launch-to-first-step, run and teardown seconds from the run folders
(summary.json ``build_s``/``teardown_s``, steps.csv ``t``), plus a check that nothing with
the run's prefix is left. Needs root. On the shared 2-core machine most of the wall time is
eight Python processes importing torch at once, not the network.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from testbed.config.scenario import load_scenario
from testbed.emulation import leftovers
from testbed.orchestration.run import run_scenario


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="results root (default: a temp dir)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="netsense-scale-"))
    ok = True
    print(f"{'scenario':18} {'status':7} {'build_s':>8} {'first_step_s':>12} {'run_s':>7} "
          f"{'teardown_s':>10} {'left':>5}")
    for name in ("scale-star8", "scale-dumbbell44"):
        scn = load_scenario(name)
        t = time.monotonic()
        outcome = run_scenario(scn, "allreduce", 0, out / name / "allreduce-s0", progress=False)
        wall = time.monotonic() - t
        s = outcome.summary
        steps = pd.read_csv(outcome.run_dir / "steps.csv")
        first = steps["t"].min() if len(steps) else float("nan")
        prefix = json.loads((outcome.run_dir / "pids.json").read_text())["prefix"]
        left = leftovers.interfaces_with_prefix(prefix)
        ok &= outcome.status == "ok" and not left
        print(f"{name:18} {outcome.status:7} {s.get('build_s', 0):8.2f} {first:12.1f} "
              f"{wall:7.1f} {s.get('teardown_s', 0):10.2f} {len(left):5d}")
        if outcome.status != "ok":
            print(f"  reason: {s.get('reason')}")
    print(f"run folders: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
