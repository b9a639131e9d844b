"""Real emulation tests: namespaces, shaped veth links, iperf3 traffic, teardown, clean.

Each test uses its own fresh prefix and a private state directory, and checks only for
leftovers carrying its own prefix (other runs may be active on the same machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.emulation import Emulation, EmulationError, kernel, leftovers
from topologies import spec

pytestmark = pytest.mark.emulation

REPO = Path(__file__).resolve().parents[2]


def _assert_nothing_left(prefix: str, pids: list[dict], state_dir: Path) -> None:
    assert leftovers.interfaces_with_prefix(prefix) == []
    alive = [e for e in pids if leftovers.is_same_process(e)]
    assert alive == [], f"processes still alive: {alive}"
    assert not (state_dir / f"{prefix}.json").exists()


def test_link_fidelity_10_50_200(tmp_path):
    """iperf3 goodput w0 -> w1 is within 10% of the configured rate (built, then changed)."""
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 10.0}, state_dir=tmp_path) as emu:
        measured = {}
        for rate in (10.0, 50.0, 200.0):
            for link in ("w0", "w1"):
                emu.set_rate(link, rate)
            assert emu.link_rate("w1") == rate
            measured[rate] = emu.iperf3_goodput("w0", "w1", seconds=2.5)
        print("fidelity", {k: round(v, 2) for k, v in measured.items()})
        for rate, got in measured.items():
            assert abs(got - rate) <= 0.10 * rate, f"{rate} Mbit/s link gave {got:.1f}"


def test_rate_change_shows_within_one_second(tmp_path):
    """Goodput (w1's rx counter at 10 Hz) follows set_rate down and up within 1 s."""
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 100.0}, state_dir=tmp_path) as emu:
        port = emu.next_port()
        server = emu.iperf3_server("w1", port)
        client = emu.popen("w0", ["iperf3", "-c", emu.ip("w1"), "-p", str(port), "-t", "5"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        schedule = [(t0 + 1.5, 20.0), (t0 + 3.0, 80.0)]
        applied = []

        def timeline():
            for when, rate in schedule:
                time.sleep(max(0.0, when - time.monotonic()))
                emu.set_rate("w1", rate)
                applied.append(time.monotonic())

        th = threading.Thread(target=timeline)
        th.start()
        samples = []
        while time.monotonic() < t0 + 4.6:
            samples.append((time.monotonic(), emu.rx_bytes("w1")))
            time.sleep(0.1)
        th.join()
        emu.kill(client)
        emu.kill(server)
    rates = [(t1, (b1 - b0) * 8 / (t1 - t0_) / 1e6)
             for (t0_, b0), (t1, b1) in zip(samples, samples[1:], strict=False)]
    lags = []
    assert len(applied) == len(schedule)
    for when, rate in schedule:
        hit = [t for t, r in rates if t > when and abs(r - rate) <= 0.2 * rate]
        assert hit, f"rate never reached {rate}: {rates}"
        lags.append(hit[0] - when)
    print("rate-change lags (s)", [round(x, 3) for x in lags],
          "apply delay (s)", [round(a - w, 4) for (w, _), a in zip(schedule, applied, strict=True)])
    assert all(lag <= 1.0 for lag in lags), lags
    before = [r for t, r in rates if t0 + 0.5 < t < schedule[0][0]]
    assert abs(sum(before) / len(before) - 100.0) <= 15.0


def test_stop_removes_interfaces_processes_and_shells(tmp_path):
    emu = Emulation("dumbbell", {"n_left": 1, "n_right": 1, "n_cross": 2,
                                 "bottleneck_mbit": 100.0}, state_dir=tmp_path)
    emu.start()
    assert (tmp_path / f"{emu.prefix}.json").exists()
    assert emu.intf("w1") == f"{emu.prefix}w1-eth0"
    assert len(leftovers.interfaces_with_prefix(emu.prefix)) >= 3  # bridges + switch ends
    emu.popen("w0", ["sleep", "60"])
    emu.popen("x1", ["bash", "-c", "sleep 61 & sleep 62"])  # a child in the same group
    stubborn = emu.popen("x0", ["bash", "-c", "trap '' TERM; while :; do sleep 0.05; done"])
    time.sleep(0.2)
    registered = json.loads((tmp_path / f"{emu.prefix}.json").read_text())["processes"]
    assert sum(e["role"].startswith("shell:") for e in registered) == 6  # 4 hosts, 2 bridges
    children = _group_members([e["pid"] for e in registered if e["role"].startswith("proc:")])
    assert len(children) >= 4
    emu.stop()
    _assert_nothing_left(emu.prefix, registered, tmp_path)
    assert not [p for p in children if leftovers.proc_starttime(p) is not None]
    assert stubborn.returncode == -signal.SIGKILL  # ignored SIGTERM, so it got SIGKILL
    emu.stop()  # idempotent


def _group_members(pgids: list[int]) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) in pgids:
                    out.append(int(d.name))
            except ProcessLookupError:
                pass
    return out


class _FailsLate(Emulation):
    def _after_build(self) -> None:
        raise EmulationError("injected failure after the network was built")


def test_partially_failed_start_cleans_up(tmp_path):
    emu = _FailsLate("star", {"n_workers": 3, "n_cross": 0, "rate_mbit": 100.0},
                     state_dir=tmp_path)
    with pytest.raises(EmulationError, match="injected"):
        emu.start()
    _assert_nothing_left(emu.prefix, emu._registry.processes, tmp_path)
    assert len(emu._registry.processes) == 4  # 3 host shells + 1 bridge shell were made


def test_impairments_need_netem(tmp_path):
    emu = Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 100.0, "delay_ms": 5.0},
                    state_dir=tmp_path)
    if kernel.has_netem():
        with emu:
            assert emu.iperf3_goodput("w0", "w1", 1.0) > 0
    else:
        with pytest.raises(kernel.NetemUnavailable, match="sch_netem"):
            emu.start()
    _assert_nothing_left(emu.prefix, [], tmp_path)


def test_congestion_control_set_in_every_namespace(tmp_path, monkeypatch):
    """Every host's namespace (cross hosts too) gets topology.congestion_control before
    anything runs in it, and a new socket there uses it; the machine's own is untouched.
    None asked: the testbed's default (cubic), or the machine's where the kernel lacks it."""
    default = kernel.default_congestion_control()
    testbed_default = spec.DEFAULT_CONGESTION_CONTROL
    other = next((c for c in kernel.congestion_controls() + kernel.available_congestion_controls()
                  if c not in (default, testbed_default)), None)
    if other is None:
        pytest.skip(f"this kernel has no TCP but {default} and {testbed_default}")
    emu = Emulation("star", {"n_workers": 2, "n_cross": 1, "rate_mbit": 100.0},
                    state_dir=tmp_path, congestion_control=other)
    with emu:
        assert emu.congestion_controls() == {"w0": other, "w1": other, "x0": other}
        probe = ("import socket; s = socket.socket(); print(s.getsockopt(socket.IPPROTO_TCP, "
                 "socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode())")
        proc = emu.popen("w1", [sys.executable, "-c", probe], stdout=subprocess.PIPE)
        assert proc.communicate(timeout=30)[0].decode().strip() == other
    assert kernel.default_congestion_control() == default
    if testbed_default in kernel.available_congestion_controls():
        with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 100.0},
                       state_dir=tmp_path) as emu:  # none given: the testbed's
            assert set(emu.congestion_controls().values()) == {testbed_default}
        _assert_nothing_left(emu.prefix, [], tmp_path)
    # A kernel without the testbed's default: the hosts keep the machine's (and say so)
    monkeypatch.setattr(kernel, "available_congestion_controls", lambda: [default])
    monkeypatch.setattr(kernel, "congestion_controls", lambda: [default])
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 100.0},
                   state_dir=tmp_path) as emu:
        assert emu.congestion_control is None
        assert set(emu.congestion_controls().values()) == {default}
    _assert_nothing_left(emu.prefix, [], tmp_path)


CRASHER = """
import sys, time
from pathlib import Path
from testbed.emulation import Emulation
emu = Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 50.0},
                state_dir=Path(sys.argv[1]))
emu.start()
emu.popen("w0", ["sleep", "60"])
print(emu.prefix, flush=True)
time.sleep(60)
"""


def test_clean_removes_what_a_killed_run_left(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        prefix = proc.stdout.readline().strip()
        assert prefix.startswith("nst"), "crasher did not start"
        report = leftovers.clean(state_dir=tmp_path)  # its owner is alive: a run in progress
        assert report["skipped_active"] == [prefix] and not report["pids_killed"]
        assert leftovers.interfaces_with_prefix(prefix)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run dies without any teardown
        proc.wait()
    left = leftovers.find(state_dir=tmp_path, prefix=prefix)
    assert left["interfaces"] and left["pids"], left
    report = leftovers.clean(state_dir=tmp_path)
    assert set(left["pids"]) <= set(report["pids_killed"])
    assert f"{prefix}s0" in report["interfaces_removed"]  # the bridge never goes by itself
    assert leftovers.find(state_dir=tmp_path, prefix=prefix)["pids"] == []
    assert leftovers.interfaces_with_prefix(prefix) == []
    assert not (tmp_path / f"{prefix}.json").exists()


def test_leafspine_uplink_rate_and_ecmp_over_spines(tmp_path):
    """One flow leaf->leaf gets one uplink's rate; 12 flows spread over both spines."""
    params = {"leaves": 2, "spines": 2, "hosts_per_leaf": 1, "uplink_mbit": 30.0}
    with Emulation("leafspine", params, state_dir=tmp_path) as emu:
        one = emu.iperf3_goodput("w0", "w1", seconds=1.5)
        assert abs(one - 30.0) <= 3.0, one
        port = emu.next_port()
        server = emu.iperf3_server("w1", port)
        client = emu.popen("w0", ["iperf3", "-c", emu.ip("w1"), "-p", str(port), "-t", "2.5",
                                  "-P", "12"], stdout=subprocess.DEVNULL)
        time.sleep(1.0)
        b0, t0 = emu.rx_bytes("w1"), time.monotonic()
        time.sleep(1.0)
        agg = (emu.rx_bytes("w1") - b0) * 8 / (time.monotonic() - t0) / 1e6
        emu.kill(client)
        emu.kill(server)
    print("leaf-spine single flow", round(one, 1), "12 flows (L2 rx)", round(agg, 1))
    assert 42.0 <= agg <= 66.0, agg  # two 30 Mbit/s spines in use, not one


def test_failure_while_links_are_built_cleans_up(tmp_path, monkeypatch):
    """tc failing on the 3rd shaped interface (hosts, veths, bridge shells exist by then)."""
    from topologies import shaping

    real = shaping.shape_lines
    calls = []

    def third_fails(dev, *args, **kwargs):
        calls.append(dev)
        lines = real(dev, *args, **kwargs)
        return lines if len(calls) != 3 else [*lines, "qdisc add dev nosuchdev root htb"]

    monkeypatch.setattr(shaping, "shape_lines", third_fails)
    emu = Emulation("star", {"n_workers": 3, "n_cross": 0, "rate_mbit": 100.0}, state_dir=tmp_path)
    with pytest.raises(RuntimeError, match="tc failed"):
        emu.start()
    assert len(calls) == 3
    _assert_nothing_left(emu.prefix, emu._registry.processes, tmp_path)
    assert len(emu._registry.processes) == 4


def test_name_lookups_inside_hosts_fail_fast(tmp_path):
    """A reverse lookup of a peer (what torch's TCPStore does per socket) takes no time.

    Without the unreachable routes it took 6.1 s per lookup here (the name server's address
    lies inside the hosts' 10.0.0.0/8, so each query ARPs on the emulated link and times out).
    """
    from testbed.emulation.emulated_network import name_servers

    code = ("import socket, time\n"
            "t = time.perf_counter()\n"
            "try:\n    socket.getnameinfo((sys_ip, 29500), 0)\n"
            "except OSError:\n    pass\n"
            "print(time.perf_counter() - t)\n")
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 100.0}, state_dir=tmp_path) as emu:
        routes = subprocess.run(["mnexec", "-a", str(emu.host_pid("w0")), "ip", "route"],
                                capture_output=True, text=True, check=True).stdout
        for server in name_servers():
            assert f"unreachable {server}" in routes, routes
        proc = emu.popen("w0", [sys.executable, "-c", f"sys_ip = {emu.ip('w1')!r}\n" + code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert float(out) < 0.5, f"getnameinfo took {float(out):.2f} s inside the namespace"
    main_routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    assert "unreachable" not in main_routes  # the root namespace is left alone



def test_node_commands_fail_on_their_exit_status_not_on_warnings():
    """iproute2 warns on success ("Dump was interrupted ..." while another run adds links):
    a shaping or route command is judged by its exit status, and a real failure still
    raises with what the command printed (CI once failed a sweep on such a warning)."""
    from mininet.node import Node

    from topologies.links import run_checked

    node = Node("nstrcchk", inNamespace=True)
    try:
        rc, out = run_checked(node, "echo 'Dump was interrupted and may be inconsistent.' >&2")
        assert rc == 0 and "Dump was interrupted" in out
        rc, out = run_checked(node, "ip route replace 10.77.0.0/24 via 10.78.0.1")
        assert rc != 0 and out  # no route to the gateway: ip's own error comes back
        rc, out = run_checked(node, "ip -o link show lo")
        assert rc == 0 and "lo:" in out
    finally:
        node.terminate()
