"""One TCP flow against two opposite flows through the same shaped links (gap 1's mechanism).

    .venv/bin/python benchmarks/two_way.py --rate 100 [--cc bbr] [--seconds 6]

Two hosts on the project's star (``testbed.emulation.Emulation``, every access link HTB at
``--rate`` Mbit/s real): ``one`` is iperf3 w0 -> w1 alone; ``two`` is iperf3 ``--bidir``
(w0 -> w1 and w1 -> w0 at once), so every shaped queue carries one flow's data and the
other flow's ACKs -- what each host link of a ring allreduce carries (``--ack-first``: the
topology's ``ack_first``, pure ACKs ahead of data in each host's queue). Prints each flow's
receiver goodput as a share of the rate (one flow of 1448-byte segments reaches ~0.957).
Needs root, mnexec, tc, iperf3; run it under the heavy-work lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(rate: float, cc: str | None, seconds: float, bidir: bool,
            ack_first: bool = False) -> list[float]:
    from testbed.emulation import Emulation

    emu = Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": rate},
                    congestion_control=cc, ack_first=ack_first)
    emu.start()
    try:
        port = emu.next_port()
        server = emu.iperf3_server("w1", port)
        argv = ["iperf3", "-c", emu.ip("w1"), "-p", str(port), "-t", f"{seconds:g}", "-J",
                "-O", "1"]
        client = emu.popen("w0", argv + (["--bidir"] if bidir else []),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = client.communicate(timeout=seconds + 30)
        emu.kill(server)
        data = json.loads(out or "{}")
        if "error" in data or client.returncode != 0:
            raise RuntimeError(f"iperf3 failed: {data.get('error') or err.decode()}")
        end = data["end"]
        got = [end["sum_received"]["bits_per_second"]]
        if bidir:
            got.append(end["sum_received_bidir_reverse"]["bits_per_second"])
        return [g / (rate * 1e6) for g in got]
    finally:
        emu.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--cc", default=None)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--mode", choices=("one", "two", "both"), default="both")
    ap.add_argument("--ack-first", action="store_true", help="topology.ack_first")
    a = ap.parse_args()
    for mode in (("one", "two") if a.mode == "both" else (a.mode,)):
        shares = measure(a.rate, a.cc, a.seconds, mode == "two", a.ack_first)
        print(f"rate {a.rate:g} cc {a.cc or 'default'}{' ack-first' if a.ack_first else ''} "
              f"{mode}: "
              + " ".join(f"{s:.3f}" for s in shares), flush=True)


if __name__ == "__main__":
    main()
