"""Leaf-spine: `leaves` leaf routers, each joined to every one of `spines` spine routers.

    p0     p1          spines (uplinks at uplink_mbit)
    | \\   / |
    l0     l1          leaves (host access links at access_mbit)
   w0 w1  w2 w3

Oversubscription is set by the rates: hosts_per_leaf * access_mbit / (spines * uplink_mbit).
Named links: "l<i>-p<j>" (uplinks) and "w0".. (host access links).

Why routers, not bridges: with more than one spine an L2 fabric has loops, and STP would
leave one spine per leaf in use, so the spines' capacity would not add up.  Here leaves
and spines are IPv4 routers (own namespaces, static routes); a leaf reaches other leaves'
hosts over all spines with ECMP hashed on L4 ports, as a real fabric does.  Addressing:
worker n is 10.1.n.2/24 behind its leaf's 10.1.n.1; uplink (i, j) is 10.2.(i*spines+j).0/24
(leaf .1, spine .2).  All interfaces live in the routers' and hosts' namespaces.

    mn --custom topologies/leafspine.py --topo leafspine,2,2,2 --switch lxbr --controller none
"""

from __future__ import annotations

try:
    from topologies import spec
    from topologies.base import NamedTopo, check_count, check_queue
    from topologies.spec import Field
except ImportError:  # `mn --custom` from the repository root without the package installed
    import os
    import sys

    sys.path.insert(0, os.getcwd())
    from topologies import spec
    from topologies.base import NamedTopo, check_count, check_queue
    from topologies.spec import Field


class LeafSpineParams(spec.ShapedParams):
    """Two-tier Clos: hosts under leaves, every leaf wired to every spine."""

    leaves: int = Field(2, gt=0, le=16)
    """Leaf switches. Default 2."""
    spines: int = Field(2, gt=0, le=16)
    """Spine switches, each linked to every leaf. Default 2."""
    hosts_per_leaf: int = Field(2, gt=0, le=16)
    """Training workers per leaf. Default 2."""
    access_mbit: float = Field(1000.0, ge=0.01, le=100000)
    """Rate of every host-to-leaf link, Mbit/s. Default 1000."""
    uplink_mbit: float = Field(100.0, ge=0.01, le=100000)
    """Rate of every leaf-to-spine link, Mbit/s. Default 100."""

    def worker_hosts(self) -> list[str]:
        return spec.workers(self.leaves * self.hosts_per_leaf)

    def link_rates(self) -> dict[str, float | None]:
        uplinks = {f"l{i}-p{j}": self.uplink_mbit
                   for i in range(self.leaves) for j in range(self.spines)}
        return {**uplinks, **{h: self.access_mbit for h in self.hosts()}}

    def probe_pairs(self) -> dict[str, tuple[str, str]]:
        # Access links only, from a host under the same leaf; which uplink carries a flow
        # is the ECMP hash's choice, so no pair is known to cross a given uplink.
        return self.access_pairs()


class LeafSpineTopo(NamedTopo):
    """k leaves x s spines (routers), hosts_per_leaf workers per leaf, numbered leaf by leaf."""

    Params = LeafSpineParams

    positional = ("leaves", "spines", "hosts_per_leaf", "access_mbit", "uplink_mbit",
                  "queue_pkts")

    def build(self, *args, prefix="", **given):
        p = self.values(args, given)
        self.init_naming(prefix)
        leaves, spines, hosts_per_leaf = p.leaves, p.spines, p.hosts_per_leaf
        access_mbit, uplink_mbit, queue_pkts = p.access_mbit, p.uplink_mbit, p.queue_pkts
        check_count("leaves", leaves, 1)
        check_count("spines", spines, 1)
        check_count("hosts_per_leaf", hosts_per_leaf, 1)
        check_queue(queue_pkts)
        if leaves * spines > 250 or leaves * hosts_per_leaf > 250:
            raise ValueError("leaves*spines and leaves*hosts_per_leaf must be <= 250 "
                             "(one /24 per link in 10.1.0.0/16 and 10.2.0.0/16)")
        impair = {"delay_ms": p.delay_ms, "jitter_ms": p.jitter_ms, "loss_pct": p.loss_pct}
        for j in range(spines):
            self.add_router(f"p{j}")
        for i in range(leaves):
            self.add_router(f"l{i}")
            for j in range(spines):
                net = f"10.2.{i * spines + j}"
                self.add_shaped_link(f"l{i}-p{j}", f"l{i}", f"p{j}", uplink_mbit, queue_pkts,
                                     ip1=f"{net}.1/24", ip2=f"{net}.2/24", **impair)
        leaf_of = {}
        for i in range(leaves):
            for k in range(hosts_per_leaf):
                n = i * hosts_per_leaf + k
                w = self.add_worker(n, ip=f"10.1.{n}.2/24", defaultRoute=f"via 10.1.{n}.1")
                self.add_shaped_link(w, w, f"l{i}", access_mbit, queue_pkts,
                                     ip1=f"10.1.{n}.2/24", ip2=f"10.1.{n}.1/24")
                leaf_of[n] = i
        for i in range(leaves):
            routes = []
            for n, leaf in leaf_of.items():
                if leaf != i:
                    hops = " ".join(f"nexthop via 10.2.{i * spines + j}.2" for j in range(spines))
                    routes.append(f"10.1.{n}.0/24 {hops}")
            self.nodeInfo(self.node_name(f"l{i}"))["routes"] = routes
        for j in range(spines):
            self.nodeInfo(self.node_name(f"p{j}"))["routes"] = [
                f"10.1.{n}.0/24 via 10.2.{leaf * spines + j}.1" for n, leaf in leaf_of.items()]
        self.validate_names()


topos = {"leafspine": LeafSpineTopo}
