"""Topology checks that need no root: names, links, routes, tc lines, and each built-in
topology file loadable as ``mn --custom`` loads it."""

from __future__ import annotations

import pytest

from tests.topologies.mn_custom import MN_LOAD, mn_interpreter
from topologies import shaping
from topologies.dumbbell import DumbbellTopo
from topologies.leafspine import LeafSpineTopo
from topologies.star import StarTopo


def _intf_names(topo) -> list[str]:
    return [f"{n}-eth{info[p]}" for a, b, info in topo.links(withKeys=False, withInfo=True)
            for n, p in ((a, "port1"), (b, "port2"))]


def test_star_names_and_links():
    t = StarTopo(n_workers=3, n_cross=1, rate_mbit=100.0, prefix="nst3f9a")
    assert t.worker_hosts == ["w0", "w1", "w2"] and t.cross_hosts == ["x0"]
    assert set(t.named_links) == {"w0", "w1", "w2", "x0"}
    assert all(n.startswith("nst3f9a") for n in t.hosts() + t.switches())
    assert "nst3f9aw0-eth0" in _intf_names(t)


def test_dumbbell_crosses_bottleneck_and_splits_cross_hosts():
    t = DumbbellTopo(n_left=2, n_right=3, n_cross=2, bottleneck_mbit=100.0, prefix="nstabcd")
    assert t.worker_hosts == ["w0", "w1", "w2", "w3", "w4"]
    bn = t.named_links["bottleneck"]
    assert {bn.node1, bn.node2} == {"nstabcds0", "nstabcds1"} and bn.rate_mbit == 100.0
    assert t.named_links["x0"].node2 == "nstabcds0" and t.named_links["x1"].node2 == "nstabcds1"
    assert t.named_links["w1"].node2 == "nstabcds0" and t.named_links["w2"].node2 == "nstabcds1"


def test_leafspine_full_mesh_uplinks():
    t = LeafSpineTopo(leaves=3, spines=2, hosts_per_leaf=2, uplink_mbit=50.0, prefix="nst0000")
    ups = sorted(n for n in t.named_links if "-" in n)
    assert ups == ["l0-p0", "l0-p1", "l1-p0", "l1-p1", "l2-p0", "l2-p1"]
    assert t.named_links["l2-p1"].rate_mbit == 50.0
    assert len(t.worker_hosts) == 6
    l0 = t.nodeInfo("nst0000l0")
    assert "10.1.5.0/24 nexthop via 10.2.0.2 nexthop via 10.2.1.2" in l0["routes"]
    assert t.nodeInfo("nst0000w5")["ip"] == "10.1.5.2/24"


def test_interface_names_fit_15_chars():
    StarTopo(n_workers=10, n_cross=0, rate_mbit=100.0, prefix="nst3f9a")  # nst3f9as0-eth10 is exactly 15
    with pytest.raises(ValueError, match="15"):
        StarTopo(n_workers=100, n_cross=0, rate_mbit=100.0, prefix="nst3f9a")


def test_shaping_lines_use_htb_pfifo_and_no_netem():
    lines = shaping.shape_lines("nstabcdw0-eth0", 200.0, 64)
    assert lines[0].startswith("qdisc replace dev nstabcdw0-eth0 root handle 1: htb")
    assert "rate 200mbit ceil 200mbit" in lines[1] and "quantum" in lines[1]
    assert lines[2].endswith("pfifo limit 64") and not any("netem" in x for x in lines)
    assert shaping.quantum_bytes(1000) <= 65536 and shaping.quantum_bytes(1) >= 1514
    assert "class change" in shaping.change_rate_line("d", 20)


@pytest.mark.parametrize("name,args", [("star", (2, 50)), ("dumbbell", (2, 2, 50)),
                                       ("leafspine", (2,))])
def test_loadable_like_mn_custom(name, args):
    """`mn --custom topologies/<name>.py --topo <name>,...` execs the file and reads `topos`."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "topologies" / f"{name}.py"
    customs: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), customs, customs)  # as mn does
    topo = customs["topos"][name](*args)  # mn passes --topo arguments positionally
    assert topo.worker_hosts[:2] == ["w0", "w1"] and topo.named_links


@pytest.mark.parametrize("name,args", [("star", ["3", "50"]), ("dumbbell", ["1", "1", "50"]),
                                       ("leafspine", ["2", "1", "1"])])
def test_loadable_by_the_mn_interpreter(name, args):
    """`mn --custom topologies/<name>.py` from the repository root, under mn's own Python
    (which may lack pydantic and this package), with no PYTHONPATH."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([mn_interpreter(), "-c", MN_LOAD, f"topologies/{name}.py", name, *args],
                          cwd=repo, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert proc.returncode == 0, proc.stderr
    workers, links = proc.stdout.strip().splitlines()
    assert workers.split()[:1] == ["w0"] and links
