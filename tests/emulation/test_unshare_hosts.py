"""Hosts whose shells get their network namespace from `unshare --net` (not `mnexec -n`).

That is how the emulation builds hosts where a new network namespace may not mount its own
sysfs (unprivileged containers, see testbed.emulation.emulated_network._host_class); `make
container-smoke` exercises it there.  Here it is forced, on a machine where mnexec -n would
work, to show the same network comes out: each host in a namespace of its own, shaped
traffic between them, and a complete teardown.
"""

from __future__ import annotations

import os

import pytest

from testbed.emulation import Emulation, leftovers, rootless

pytestmark = pytest.mark.emulation


def test_hosts_started_with_unshare_carry_shaped_traffic(tmp_path, monkeypatch):
    monkeypatch.setattr(rootless, "sysfs_mountable", lambda: False)
    with Emulation("star", {"n_workers": 2, "n_cross": 0, "rate_mbit": 20.0}, state_dir=tmp_path) as emu:
        own = os.stat("/proc/self/ns/net").st_ino
        nets = {os.stat(f"/proc/{emu.host_pid(h)}/ns/net").st_ino for h in ("w0", "w1")}
        assert len(nets) == 2 and own not in nets, "hosts do not have namespaces of their own"
        assert emu._net[f"{emu.prefix}w0"].__class__.__name__ == "UnshareNetHost"
        goodput = emu.iperf3_goodput("w0", "w1", seconds=2)
        assert abs(goodput - 20.0) <= 2.0, goodput
        prefix, pids = emu.prefix, list(emu._registry.processes)
    assert leftovers.interfaces_with_prefix(prefix) == []
    assert not [e for e in pids if leftovers.is_same_process(e)]
    assert not (tmp_path / f"{prefix}.json").exists()
