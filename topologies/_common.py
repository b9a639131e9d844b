"""Building blocks shared by the NetSense topologies.

Why this exists: Mininet's own ``TCLink``/``TCIntf`` always puts the queue size (and delay,
loss) into a *netem* qdisc.  The kernels we build on have no ``sch_netem``, so a TCLink with
``max_queue_size`` fails there.  ``ShapedLink`` is a plain veth pair whose two ends are
shaped by our own tc tree (``testbed.shaping``): HTB root, one class at the link rate, a
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
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

try:  # the package is installed editable; `mn --custom` runs from the repository root
    from testbed import shaping
except ImportError:  # pragma: no cover - only when mn runs outside an installed checkout
    sys.path.insert(0, os.getcwd())
    from testbed import shaping

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
    """Interface shaped by ``testbed.shaping`` (HTB + pfifo, netem only if requested)."""

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
    """veth pair with both ends shaped; accepts bw, max_queue_size, delay, jitter, loss."""

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None,
                 addr1=None, addr2=None, **params):
        Link.__init__(self, node1, node2, port1=port1, port2=port2, intfName1=intfName1,
                      intfName2=intfName2, cls1=ShapedIntf, cls2=ShapedIntf, addr1=addr1,
                      addr2=addr2, params1=params, params2=params)


class StpBridge(LinuxBridge):
    """Linux bridge running STP with the shortest timers the kernel allows.

    Why: with more than one spine an L2 leaf-spine has loops; STP breaks them.  Forward
    delay 2 s (the kernel minimum) keeps convergence to a few seconds instead of 30.
    """

    def __init__(self, name, **kwargs):
        kwargs["stp"] = True
        LinuxBridge.__init__(self, name, **kwargs)

    def start(self, _controllers):
        self.cmd("ip link add", self, "type bridge stp_state 1 forward_delay 200 "
                 "hello_time 100 max_age 600")
        for intf in self.intfList():
            if self.name in intf.name:
                self.cmd("ip link set", intf, "master", self)
        self.cmd("ip link set", self, "up")


class NamedTopo(Topo):
    """Topo base: prefixed node names, shaped links, named links, name-length validation."""

    def _init_naming(self, prefix: str) -> None:
        self.prefix = prefix
        self.named_links: dict[str, LinkInfo] = {}
        self.worker_hosts: list[str] = []
        self.cross_hosts: list[str] = []
        self._nswitch = 0

    def node_name(self, logical: str) -> str:
        return f"{self.prefix}{logical}"

    def add_worker(self, index: int) -> str:
        logical = f"w{index}"
        self.addHost(self.node_name(logical))
        self.worker_hosts.append(logical)
        return logical

    def add_cross(self, index: int) -> str:
        logical = f"x{index}"
        self.addHost(self.node_name(logical))
        self.cross_hosts.append(logical)
        return logical

    def add_switch(self, logical: str, cls=LinuxBridge) -> str:
        self._nswitch += 1
        self.addSwitch(self.node_name(logical), cls=cls, dpid=f"{self._nswitch:016x}")
        return logical

    def add_shaped_link(self, name: str, a: str, b: str, rate_mbit: float | None,
                        queue_pkts: int, delay_ms=None, jitter_ms=None, loss_pct=None) -> None:
        """Add a link between logical nodes a and b; rate None leaves it unshaped."""
        opts: dict = {}
        if rate_mbit is not None:
            _check_positive(f"rate of link {name}", rate_mbit)
            opts = {"bw": float(rate_mbit), "max_queue_size": int(queue_pkts)}
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
