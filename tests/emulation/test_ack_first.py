"""topology.ack_first on real emulated links: the tree it builds, and what it is for.

Two opposite TCP flows through the same shaped links (each host's queue carries its own
data and the ACKs of the flow it receives) under BBR: with one FIFO per host the ACKs wait
behind the host's outgoing data (10-30 ms at tens of Mbit/s) and BBR, whose window is the
path's min RTT (~10 us on veth) times the rate plus a small allowance, stays window-limited
below the link: 0.83-0.92 of the rate at 33 Mbit/s, 0.90 at 100 (results/simulation/ring-loss.md).
With ACKs first both flows keep what one flow alone gets (~0.955: headers).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from testbed.emulation import Emulation, kernel

pytestmark = pytest.mark.emulation


def _bidir_shares(emu: Emulation, rate: float, seconds: float) -> list[float]:
    port = emu.next_port()
    server = emu.iperf3_server("w1", port)
    try:
        client = emu.popen("w0", ["iperf3", "-c", emu.ip("w1"), "-p", str(port), "-t",
                                  f"{seconds:g}", "-O", "1", "-J", "--bidir"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = client.communicate(timeout=seconds + 30)
    finally:
        emu.kill(server)
    end = json.loads(out)["end"]
    return [end[k]["bits_per_second"] / (rate * 1e6)
            for k in ("sum_received", "sum_received_bidir_reverse")]


def test_ack_first_tree_on_host_ends_only(tmp_path):
    """The hosts' ends get the ACK and data classes under 1:1; the switch's ends keep the
    plain tree; a rate change moves both host classes with their parent."""
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 50.0}, state_dir=tmp_path,
                   ack_first=True) as emu:
        for dev, pid, _ in emu.link_ends("w0"):
            argv = (["mnexec", "-a", str(pid)] if pid else []) + ["tc", "class", "show", "dev",
                                                                    dev]
            classes = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            has_split = "1:10" in classes and "1:20" in classes
            assert has_split == (pid is not None), classes  # host end: own namespace
        emu.set_rate("w0", 20.0)
        emu.set_rate("w1", 20.0)
        got = emu.iperf3_goodput("w0", "w1", seconds=2.5)
        assert 0.85 * 20 <= got <= 1.02 * 20, got


@pytest.mark.slow  # 6 s of two-way traffic: make test-slow (and .ci/run) runs it
@pytest.mark.skipif("bbr" not in kernel.congestion_controls(),
                    reason="needs BBR in a namespace (net.ipv4.tcp_allowed_congestion_control)")
def test_ack_first_keeps_two_way_bbr_at_the_rate(tmp_path):
    """Two opposite BBR flows at 50 Mbit/s: each keeps >= 0.93 of the rate with ACKs first
    (one FIFO: 0.83-0.92 at 33-100 Mbit/s on the machine this was written on)."""
    rate = 50.0
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": rate}, state_dir=tmp_path,
                   congestion_control="bbr", ack_first=True) as emu:
        shares = _bidir_shares(emu, rate, seconds=5.0)
    print("two-way bbr, ack_first:", [round(s, 3) for s in shares])
    assert min(shares) >= 0.93, shares
