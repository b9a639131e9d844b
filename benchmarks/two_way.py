"""One TCP flow against two opposite flows through the same shaped links (gap 1's mechanism).

    .venv/bin/python benchmarks/two_way.py --rate 100 [--cc bbr] [--seconds 6] [--cross N]

Two hosts on the project's star (``testbed.emulation.Emulation``, every access link HTB at
``--rate`` Mbit/s real): ``one`` is iperf3 w0 -> w1 alone; ``two`` is iperf3 ``--bidir``
(w0 -> w1 and w1 -> w0 at once), so every shaped queue carries one flow's data and the
other flow's ACKs -- what each host link of a ring allreduce carries (``--ack-first``: the
topology's ``ack_first``, pure ACKs ahead of data in each host's queue). Prints each flow's
receiver goodput as a share of the rate (one flow of 1448-byte segments reaches ~0.957).
``--cross N`` adds N iperf3 streams x0 -> w1 for the same seconds (a cross host on its own
access link): they share w1's downlink with the w0 -> w1 flow (its max-min fair share is
1/(N+1) of the rate) and their ACKs leave through w1's uplink beside its data, so it shows
what ``ack_first`` does to a congested share; printed after the flows as ``cross``.
Needs root, mnexec, tc, iperf3; run it under the heavy-work lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _client(emu, host: str, port: int, seconds: float, extra: list[str]):
    argv = ["iperf3", "-c", emu.ip("w1"), "-p", str(port), "-t", f"{seconds:g}", "-J",
            "-O", "1", *extra]
    return emu.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(client, seconds: float) -> dict:
    out, err = client.communicate(timeout=seconds + 30)
    data = json.loads(out or "{}")
    if "error" in data or client.returncode != 0:
        raise RuntimeError(f"iperf3 failed: {data.get('error') or err.decode()}")
    return data["end"]


def measure(rate: float, cc: str | None, seconds: float, bidir: bool,
            ack_first: bool = False, cross: int = 0) -> list[float]:
    from testbed.emulation import Emulation

    emu = Emulation("star", {"n_workers": 2, "n_cross": 1 if cross else 0, "rate_mbit": rate},
                    congestion_control=cc, ack_first=ack_first)
    emu.start()
    try:
        port, cport = emu.next_port(), emu.next_port()
        servers = [emu.iperf3_server("w1", port)]
        if cross:
            servers.append(emu.iperf3_server("w1", cport))
        client = _client(emu, "w0", port, seconds, ["--bidir"] if bidir else [])
        other = _client(emu, "x0", cport, seconds, ["-P", str(cross)]) if cross else None
        end = _result(client, seconds)
        got = [end["sum_received"]["bits_per_second"]]
        if bidir:
            got.append(end["sum_received_bidir_reverse"]["bits_per_second"])
        if other is not None:
            got.append(_result(other, seconds)["sum_received"]["bits_per_second"])
        for server in servers:
            emu.kill(server)
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
    ap.add_argument("--cross", type=int, default=0, metavar="N",
                    help="N iperf3 streams x0 -> w1 beside the flows (0: none)")
    a = ap.parse_args()
    for mode in (("one", "two") if a.mode == "both" else (a.mode,)):
        shares = measure(a.rate, a.cc, a.seconds, mode == "two", a.ack_first, a.cross)
        flows = shares[:-1] if a.cross else shares
        print(f"rate {a.rate:g} cc {a.cc or 'default'}{' ack-first' if a.ack_first else ''} "
              f"{mode}: " + " ".join(f"{s:.3f}" for s in flows)
              + (f" cross({a.cross}) {shares[-1]:.3f}" if a.cross else ""), flush=True)


if __name__ == "__main__":
    main()
