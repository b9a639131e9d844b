"""Leaf-spine: `leaves` leaf switches, each joined to every one of `spines` spine switches.

    p0     p1          spines (uplinks at uplink_mbit)
    | \\   / |
    l0     l1          leaves (hosts at access_mbit)
   w0 w1  w2 w3

Oversubscription is set by the rates: hosts_per_leaf * access_mbit / (spines * uplink_mbit).
Named links: "l<i>-p<j>" (uplinks) and "w0".. (host access links).

With more than one spine the L2 fabric has loops, so the bridges run STP (shortest kernel
timers, a few seconds to converge, see `Emulation.start`) and STP keeps one spine path per
leaf active: traffic does not spread over spines as it would with L3 ECMP.

    mn --custom topologies/leafspine.py --topo leafspine,2,2,2 --switch lxbr --controller none
"""

from __future__ import annotations

try:
    from topologies._common import NamedTopo, StpBridge, check_count, check_queue
except ImportError:  # `mn --custom` from the repository root without the package installed
    import os
    import sys

    sys.path.insert(0, os.getcwd())
    from topologies._common import NamedTopo, StpBridge, check_count, check_queue

from mininet.nodelib import LinuxBridge


class LeafSpineTopo(NamedTopo):
    """k leaves x s spines, hosts_per_leaf workers per leaf (w0.. numbered leaf by leaf)."""

    def build(self, leaves=2, spines=2, hosts_per_leaf=2, access_mbit=1000.0,
              uplink_mbit=100.0, queue_pkts=100, prefix="", delay_ms=None, jitter_ms=None,
              loss_pct=None):
        self._init_naming(prefix)
        check_count("leaves", leaves, 1)
        check_count("spines", spines, 1)
        check_count("hosts_per_leaf", hosts_per_leaf, 1)
        check_queue(queue_pkts)
        cls = StpBridge if spines > 1 else LinuxBridge
        self.uses_stp = spines > 1
        impair = {"delay_ms": delay_ms, "jitter_ms": jitter_ms, "loss_pct": loss_pct}
        for j in range(spines):
            self.add_switch(f"p{j}", cls=cls)
        for i in range(leaves):
            leaf = self.add_switch(f"l{i}", cls=cls)
            for j in range(spines):
                self.add_shaped_link(f"{leaf}-p{j}", leaf, f"p{j}", uplink_mbit, queue_pkts,
                                     **impair)
        n = 0
        for i in range(leaves):
            for _ in range(hosts_per_leaf):
                w = self.add_worker(n)
                self.add_shaped_link(w, w, f"l{i}", access_mbit, queue_pkts)
                n += 1
        self.validate_names()


topos = {"leafspine": LeafSpineTopo}
