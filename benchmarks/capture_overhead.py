"""Cost of the bottleneck capture (testbed.emulation.capture) on the throughput it observes.

A 2-worker star; one iperf3 TCP flow w0 -> w1 for SECONDS, alternately without and with
the capture on the switch's end of w1's link (what a run with ``capture: true`` records),
REPEATS times each, at each link rate. Prints the mean goodput of both and the overhead in
percent (printed, not asserted: the project keeps the capture off by default when it costs
more than 5 %). Run as root, under the machine's heavy lock:

    python benchmarks/capture_overhead.py [--rates 100 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from testbed.emulation import capture
from testbed.emulation.emulated_network import Emulation


def measure(rate: float, seconds: float, repeats: int) -> dict[str, float]:
    plain: list[float] = []
    captured: list[float] = []
    frames = 0
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": rate}) as emu, \
            tempfile.TemporaryDirectory() as tmp:
        dev = next(d for d, pid, _ in emu.link_ends("w1") if pid is None)
        emu.iperf3_goodput("w0", "w1", 1.0)  # warm-up
        for i in range(repeats):
            plain.append(emu.iperf3_goodput("w0", "w1", seconds))
            cap = capture.Capture(dev, Path(tmp) / f"c{i}.pcap")
            cap.start()
            try:
                captured.append(emu.iperf3_goodput("w0", "w1", seconds))
            finally:
                frames += cap.stop()["frames"]
    a, b = statistics.mean(plain), statistics.mean(captured)
    return {"rate_mbit": rate, "plain_mbit": a, "capture_mbit": b,
            "overhead_pct": 100 * (a - b) / a, "frames_per_run": frames / repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[100.0, 1000.0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"{'rate Mbit/s':>12} {'plain':>9} {'capture':>9} {'overhead %':>11} {'frames':>8}")
    for rate in args.rates:
        r = measure(rate, args.seconds, args.repeats)
        print(f"{r['rate_mbit']:12.0f} {r['plain_mbit']:9.1f} {r['capture_mbit']:9.1f} "
              f"{r['overhead_pct']:11.2f} {r['frames_per_run']:8.0f}")


if __name__ == "__main__":
    main()
