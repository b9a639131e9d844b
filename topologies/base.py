"""Building blocks shared by the NetSense topologies.

Why this exists: Mininet's own ``TCLink``/``TCIntf`` always puts the queue size (and delay,
loss) into a *netem* qdisc.  The kernels we build on have no ``sch_netem``, so a TCLink with
``max_queue_size`` fails there.  ``ShapedLink`` is a plain veth pair whose two ends are
shaped by our own tc tree (``topologies.shaping``): HTB root, one class at the link rate, a
pfifo leaf holding ``max_queue_size`` packets, and netem below the class only when delay,
jitter or loss are asked for and the kernel has it.  Both ends are shaped, so both
directions of a link see the same rate and queue.

Every topology names its nodes ``<prefix><role><index>`` (workers ``w0..``, cross-traffic
hosts ``x0..``, switches ``s0..``, leaves ``l0..``, spines ``p0..``) so that all interfaces a
run creates carry the per-run prefix and can be removed exactly, and records the links an
event may target in ``topo.named_links``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from mininet.link import Intf, Link
from mininet.node import Node
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

try:  # the package is installed editable; `mn --custom` runs from the repository root
    from topologies import shaping
except ImportError:  # pragma: no cover - only when mn runs outside an installed checkout
    sys.path.insert(0, os.getcwd())
    from topologies import shaping

IFNAMSIZ = 15  # Linux limit on interface name length (16 bytes including the NUL)


@dataclass(frozen=True)
class LinkInfo:
    """A link an event can target: its two node names (as Mininet knows them) and shaping."""

    name: str
    node1: str
    node2: str
    rate_mbit: float | None
    queue_pkts: int


class ShapedIntf(Intf):
    """Interface shaped by ``topologies.shaping`` (HTB + pfifo, netem only if requested)."""

    def config(self, bw=None, max_queue_size=None, delay=None, jitter=None, loss=None,
               **params):
        result = Intf.config(self, **params)
        if bw is not None:
            lines = shaping.shape_lines(
                self.name, float(bw), int(max_queue_size or shaping.DEFAULT_QUEUE_PKTS),
                delay_ms=delay, jitter_ms=jitter, loss_pct=loss)
            for line in lines:
                out = self.cmd("tc " + line)
                if out.strip():
                    raise RuntimeError(f"tc failed on {self.name}: tc {line}: {out.strip()}")
        result["bw"] = bw
        return result


class ShapedLink(Link):
    """veth pair with both ends shaped; accepts bw, max_queue_size, delay, jitter, loss.

    params1/params2 (e.g. each end's ``ip``) are merged over the shared shaping params.
    """

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None,
                 addr1=None, addr2=None, params1=None, params2=None, **params):
        Link.__init__(self, node1, node2, port1=port1, port2=port2, intfName1=intfName1,
                      intfName2=intfName2, cls1=ShapedIntf, cls2=ShapedIntf, addr1=addr1,
                      addr2=addr2, params1={**params, **(params1 or {})},
                      params2={**params, **(params2 or {})})


class Router(Node):
    """A node in its own namespace that forwards IPv4 and installs static (ECMP) routes.

    Why: a leaf-spine fabric with several spines has loops at L2; routing at the leaves
    with equal-cost multipath over all spines (hashing on L4 ports, so parallel flows
    spread) is what real fabrics do.  ``routes`` are `ip route replace` arguments; they are
    installed in config(), which Mininet runs after all links exist.
    """

    def config(self, routes=(), **params):
        result = Node.config(self, **params)
        self.cmd("sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1")
        for route in routes:
            out = self.cmd("ip route replace " + route)
            if out.strip():
                raise RuntimeError(f"route on {self.name} failed: {route}: {out.strip()}")
        return result


class NamedTopo(Topo):
    """Topo base: prefixed node names, shaped links, named links, name-length validation."""

    def init_naming(self, prefix: str) -> None:
        self.prefix = prefix
        self.named_links: dict[str, LinkInfo] = {}
        self.worker_hosts: list[str] = []
        self.cross_hosts: list[str] = []
        self._nswitch = 0

    def node_name(self, logical: str) -> str:
        return f"{self.prefix}{logical}"

    def add_worker(self, index: int, **params) -> str:
        logical = f"w{index}"
        self.addHost(self.node_name(logical), **params)
        self.worker_hosts.append(logical)
        return logical

    def add_cross(self, index: int) -> str:
        logical = f"x{index}"
        self.addHost(self.node_name(logical))
        self.cross_hosts.append(logical)
        return logical

    def add_switch(self, logical: str) -> str:
        self._nswitch += 1
        self.addSwitch(self.node_name(logical), cls=LinuxBridge, dpid=f"{self._nswitch:016x}")
        return logical

    def add_router(self, logical: str) -> str:
        self.addHost(self.node_name(logical), cls=Router, ip=None)
        return logical

    def add_shaped_link(self, name: str, a: str, b: str, rate_mbit: float | None,
                        queue_pkts: int, delay_ms=None, jitter_ms=None, loss_pct=None,
                        ip1: str | None = None, ip2: str | None = None) -> None:
        """Add a link between logical nodes a and b; rate None leaves it unshaped.

        ip1/ip2 give the two ends addresses ('10.1.0.1/24') where the topology routes.
        """
        opts: dict = {}
        if ip1:
            opts["params1"] = {"ip": ip1}
        if ip2:
            opts["params2"] = {"ip": ip2}
        if rate_mbit is not None:
            _check_positive(f"rate of link {name}", rate_mbit)
            opts.update(bw=float(rate_mbit), max_queue_size=int(queue_pkts))
            if delay_ms is not None:
                opts["delay"] = delay_ms
            if jitter_ms is not None:
                opts["jitter"] = jitter_ms
            if loss_pct is not None:
                opts["loss"] = loss_pct
        self.addLink(self.node_name(a), self.node_name(b), cls=ShapedLink, **opts)
        self.named_links[name] = LinkInfo(name, self.node_name(a), self.node_name(b),
                                          None if rate_mbit is None else float(rate_mbit),
                                          int(queue_pkts))

    def validate_names(self) -> None:
        """Raise ValueError if any interface name would exceed IFNAMSIZ (15) characters."""
        for src, dst, info in self.links(withKeys=False, withInfo=True):
            for node, port in ((src, info["port1"]), (dst, info["port2"])):
                name = f"{node}-eth{port}"
                if len(name) > IFNAMSIZ:
                    raise ValueError(f"interface name {name!r} has {len(name)} characters; "
                                     f"Linux allows {IFNAMSIZ}: use fewer hosts per switch "
                                     "or a shorter prefix")


def _check_positive(field: str, value) -> None:
    if not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{field}: must be a positive number, got {value!r}")


def check_count(field: str, value, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    return value


def check_queue(queue_pkts) -> int:
    return check_count("queue_pkts", queue_pkts, 1)
