"""Build / teardown time of emulated networks, and the cost of one rate change.

Prints one line per topology (median of `--repeat` runs): start (namespaces, veths, tc,
bridges), stop (kill, Mininet stop, verification), and set_rate latency (both ends of one
link, `tc class change`).  Needs root, mnexec, tc.

    .venv/bin/python benchmarks/emulation.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.emulation import (
    Emulation,  # noqa: E402
    leftovers,  # noqa: E402
)

CASES = [
    ("star-8", "star", {"n_workers": 8, "n_cross": 0, "rate_mbit": 100.0}, "w3"),
    ("dumbbell-4+4", "dumbbell", {"n_left": 4, "n_right": 4, "n_cross": 2,
                                  "bottleneck_mbit": 100.0}, "bottleneck"),
    ("leafspine-2x2x2", "leafspine", {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "l0-p0"),
]


def measure(topology: str, params: dict, link: str) -> tuple[float, float, float]:
    emu = Emulation(topology, params)
    t0 = time.perf_counter()
    emu.start()
    t1 = time.perf_counter()
    try:
        changes = []
        for rate in (50.0, 20.0, 80.0, 100.0):
            s = time.perf_counter()
            emu.set_rate(link, rate)
            changes.append(time.perf_counter() - s)
    finally:
        t2 = time.perf_counter()
        emu.stop()
        t3 = time.perf_counter()
    left = leftovers.find(prefix=emu.prefix)
    if left["interfaces"] or left["pids"]:
        raise SystemExit(f"leftovers after stop: {left}")
    return t1 - t0, t3 - t2, statistics.median(changes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'topology':<17} {'nodes':>5} {'start_s':>8} {'stop_s':>8} {'set_rate_ms':>12}")
    for label, topology, params, link in CASES:
        runs = [measure(topology, params, link) for _ in range(args.repeat)]
        start, stop, change = (statistics.median(x) for x in zip(*runs, strict=True))
        emu = Emulation(topology, params)
        nodes = len(emu.topo.hosts()) + len(emu.topo.switches())
        print(f"{label:<17} {nodes:>5} {start:>8.2f} {stop:>8.2f} {change * 1000:>12.1f}",
              flush=True)


if __name__ == "__main__":
    main()
