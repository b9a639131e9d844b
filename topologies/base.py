"""The base of every NetSense topology: prefixed node names, named shaped links.

Every topology names its nodes ``<prefix><role><index>`` (workers ``w0..``, cross-traffic
hosts ``x0..``, switches ``s0..``, leaves ``l0..``, spines ``p0..``) so that all interfaces a
run creates carry the per-run prefix and can be removed exactly, and records the links an
event may target in ``topo.named_links``. Links are ``topologies.links.ShapedLink`` (our
own HTB tree, no netem unless asked for).

Imports only ``mininet.topo`` (pure Python) and ``topologies.spec``: the node and link classes
are imported when a topology is instantiated, so the scenario schema can read a topology's
``Params`` cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from mininet.topo import Topo

from topologies.graph import TopoGraph
from topologies.spec import (
    IMPAIRMENT_FIELDS,
    NAMESPACE_FIELDS,
    REQUIRED,
    fields_of,
    register_builder,
)

IFNAMSIZ = 15  # Linux limit on interface name length (16 bytes including the NUL)


@dataclass(frozen=True)
class LinkInfo:
    """A link an event can target: its two node names (as Mininet knows them) and shaping."""

    name: str
    node1: str
    node2: str
    rate_mbit: float | None
    queue_pkts: int


class NamedTopo(Topo):
    """Topo base: prefixed node names, shaped links, named links, name-length validation."""

    #: the topology's parameter model (``topologies.spec.TopologyParams``), set by each one
    Params: type
    #: the ``Params`` fields that ``mn --custom ... --topo kind,A,B`` passes positionally
    positional: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each topology's ``Params`` learns which ``build()`` makes its graph
        (``TopologyParams.graph``: its paths are read off what is built)."""
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("Params"), type):
            register_builder(cls.Params, cls)

    def values(self, args: tuple[Any, ...], given: dict[str, Any]) -> SimpleNamespace:
        """``build(*args, **given)``'s values by field name: ``args`` named by
        ``positional``, every field not given at its ``Params`` default, so that the
        parameters and their defaults are declared once (``topologies.spec``). Not
        validated here (the scenario is; the counts and rates are checked as built).
        Impairments at 0 are None, as ``TopologyParams.build_params`` gives them (no netem
        leaf for a value that is not set)."""
        fields = {k: v for k, v in fields_of(self.Params).items() if k not in NAMESPACE_FIELDS}
        if len(args) > len(self.positional):
            raise ValueError(f"{type(self).__name__}: at most {len(self.positional)} "
                             f"positional arguments ({', '.join(self.positional)})")
        given = {**dict(zip(self.positional, args, strict=False)), **given}
        unknown = [k for k in given if k not in fields]
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown for {type(self).__name__}; allowed: "
                             f"{', '.join(fields)}")
        out = {**fields, **given}
        missing = [k for k, v in out.items() if v is REQUIRED]
        if missing:
            raise ValueError(f"{missing[0]}: required for {type(self).__name__} (no default)")
        for key in IMPAIRMENT_FIELDS:
            if key in out and not out[key]:
                out[key] = None
        return SimpleNamespace(**out)

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
        from mininet.nodelib import LinuxBridge

        self._nswitch += 1
        self.addSwitch(self.node_name(logical), cls=LinuxBridge, dpid=f"{self._nswitch:016x}")
        return logical

    def add_router(self, logical: str) -> str:
        from topologies.links import Router

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
        from topologies.links import ShapedLink

        self.addLink(self.node_name(a), self.node_name(b), cls=ShapedLink, **opts)
        self.named_links[name] = LinkInfo(name, self.node_name(a), self.node_name(b),
                                          None if rate_mbit is None else float(rate_mbit),
                                          int(queue_pkts))

    def graph(self) -> TopoGraph:
        """What was built, in logical names: the hosts (workers, then cross hosts) and the
        named links between nodes (``topologies.graph``)."""
        cut = len(self.prefix)
        return TopoGraph(tuple(self.worker_hosts + self.cross_hosts),
                         tuple((li.name, li.node1[cut:], li.node2[cut:])
                               for li in self.named_links.values()))

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
