"""What a topology declares about itself: its parameters and the names it will create.

Why a declaration apart from the Mininet ``Topo``: the scenario schema must refuse a wrong
link or host name, and the orchestrator must know which host pair probes which link, the
plots which links bound training, all *before* anything is built and without Mininet
running. So every topology class carries ``Params``, a pydantic model of its ``build()``
keyword arguments (bounds included) whose methods compute, from the values alone, the
logical names the built ``Topo`` will have (``worker_hosts``, ``link_rates``...). The
orchestrator checks after the build that the two agree, so they cannot drift silently.
``Params`` is the one declaration of the parameters and their defaults: a built-in
``build()`` takes its values from it (``fields_of``, ``topologies.base.NamedTopo.values``),
so a Topo built directly (``mn --custom``, a test) gets the defaults a scenario gets.

This module imports pydantic only (no Mininet, no torch); ``topologies.registry`` maps a
``kind`` to its class. ``mn --custom topologies/X.py`` runs under the interpreter of the
``mn`` script, often the system Python without pydantic: there the models below are plain
classes (``Field`` returns its default), enough to define the topology files, never used
to validate (only the testbed validates, in its own environment).
"""

from __future__ import annotations

import functools
from typing import Any

from topologies.graph import TopoGraph


class _Required:
    """The default of a field that has none (the value must be given)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

try:
    from pydantic import BaseModel, ConfigDict, Field
except ImportError:  # pragma: no cover - `mn --custom` under a Python without pydantic
    BaseModel = object  # type: ignore[assignment,misc]
    ConfigDict = dict  # type: ignore[assignment,misc]

    def Field(default: Any = REQUIRED, **_: Any) -> Any:  # type: ignore[no-redef]  # noqa: N802
        return default

#: Fields of a ``Params`` model that are no ``build()`` argument: settings of the emulated
#: hosts' network namespaces, applied by the emulation once the hosts exist
#: (``testbed.emulation.Emulation``), never by a topology's ``build()``.
NAMESPACE_FIELDS = ("congestion_control", "ack_first")

#: TCP congestion control of every emulated host where the topology names none: Linux's own
#: default, what a cluster's hosts (the paper's too) run, set in each namespace whatever this
#: machine's default is, so that a run does not depend on the machine that ran it. BBR (some
#: kernels' build default) with the emulation's FIFO queues and a ~10 us min RTT sits
#: window-limited whenever its ACKs wait in a queue: an uncontested flow whose ACKs cross a
#: congested link keeps ~0.1 of its rate (results/simulation/ring-loss.md).
DEFAULT_CONGESTION_CONTROL = "cubic"

#: Link impairments that need the kernel's sch_netem (``topologies.shaping``); a topology
#: that declares them gets a netem leaf only for values that are set (not None, not 0).
IMPAIRMENT_FIELDS = ("delay_ms", "jitter_ms", "loss_pct")


class TopologyParams(BaseModel):
    """Base of every topology's parameter model: ``kind`` plus the topology's own fields.

    Unknown fields are refused. A subclass declares its fields with their bounds and
    implements ``worker_hosts()`` and ``link_rates()``; the other methods have defaults.
    Names are logical (``w0``, ``bottleneck``): the emulation adds the run's prefix.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    kind: str
    """Topology kind: star, dumbbell, leafspine, hosts, or package.module:Class."""

    def worker_hosts(self) -> list[str]:
        """Hosts that run one training worker each, rank order (``w0``, ``w1``, ...)."""
        raise NotImplementedError(f"{type(self).__name__}.worker_hosts()")

    def cross_hosts(self) -> list[str]:
        """Hosts for cross traffic only (``x0``, ...)."""
        return []

    def link_rates(self) -> dict[str, float | None]:
        """Every link an event may target, by name, with its configured rate in Mbit/s
        (None: unshaped)."""
        raise NotImplementedError(f"{type(self).__name__}.link_rates()")

    def hosts(self) -> list[str]:
        return self.worker_hosts() + self.cross_hosts()

    def link_names(self) -> list[str]:
        return list(self.link_rates())

    def training_links(self) -> list[str]:
        """Links training traffic may cross: by default all but the cross hosts' own.

        The plots draw the lowest configured rate over these as "the" rate over time.
        """
        cross = set(self.cross_hosts())
        return [name for name in self.link_rates() if name not in cross]

    def graph(self) -> TopoGraph | None:
        """The graph this topology's ``build()`` makes from these values, in logical names
        (``topologies.graph``); None where no ``NamedTopo`` declares this model as its
        ``Params`` or its ``build()`` refuses the values (it builds nothing real: Mininet's
        ``Topo`` only records nodes and links)."""
        return _graph(type(self), self.build_params())

    def path_links(self, src: str, dst: str) -> set[str] | None:
        """The named links traffic from host ``src`` to ``dst`` crosses (either direction of
        each): those on every shortest path of the built graph (``TopoGraph.path_links``),
        or None when there is no graph (then no check uses it). The scenario's validation
        warns of cross traffic that shares no link with training."""
        graph = self.graph()
        return None if graph is None else graph.path_links(src, dst)

    def access_pairs(self) -> dict[str, tuple[str, str]]:
        """Probe pairs for the hosts' own links, from the built graph: toward each host from
        the first other host on its switch or leaf (``TopoGraph.access_pairs``); none
        without a graph. What a built-in's ``probe_pairs`` starts from."""
        graph = self.graph()
        return {} if graph is None else graph.access_pairs(self.hosts())

    def nominal_rate_mbit(self) -> float | None:
        """The nominal rate training is bounded by (the x axis of rate sweeps)."""
        rates = self.link_rates()
        shaped = [r for r in (rates[n] for n in self.training_links()) if r is not None]
        return min(shaped) if shaped else None

    def probe_pairs(self) -> dict[str, tuple[str, str]]:
        """For each link ``probe_links`` can measure, a (src, dst) host pair whose traffic
        crosses it with nothing narrower in between; links left out are not probed."""
        return {}

    def build_params(self) -> dict[str, Any]:
        """The ``Topo.build()`` keyword arguments (everything but ``kind`` and the
        namespace settings, ``NAMESPACE_FIELDS``).

        Impairments left at 0 become None: a topology adds a netem qdisc for any value
        that is not None, and the kernel may have no netem at all.
        """
        params = self.model_dump(exclude={"kind", *NAMESPACE_FIELDS})
        for key in IMPAIRMENT_FIELDS:
            if key in params and not params[key]:
                params[key] = None
        return params

    def impairments(self) -> list[str]:
        """The netem fields this configuration sets (non-zero)."""
        return [f for f in IMPAIRMENT_FIELDS if getattr(self, f, None)]


class ShapedParams(TopologyParams):
    """Fields every built-in topology shares: queue size and the netem-only impairments."""

    queue_pkts: int = Field(100, gt=0, le=100000)
    """Queue of every shaped link, packets (pfifo under the HTB class). Default 100."""
    delay_ms: float = Field(0.0, ge=0, le=10000)
    """One-way delay added on every shaped link, ms (needs sch_netem). Default 0."""
    jitter_ms: float = Field(0.0, ge=0, le=10000)
    """Delay jitter, ms (needs sch_netem). Default 0."""
    loss_pct: float = Field(0.0, ge=0, le=100)
    """Random loss on every shaped link, percent (needs sch_netem). Default 0."""
    congestion_control: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,15}$")
    """TCP congestion control of every emulated host (net.ipv4.tcp_congestion_control in its namespace; the workers' and the iperf3 flows'), one the kernel has (net.ipv4.tcp_available_congestion_control, e.g. cubic, reno, bbr; one it has but does not yet allow a namespace is added to net.ipv4.tcp_allowed_congestion_control when the network is built, as root); none: cubic, Linux's own default (topologies.spec.DEFAULT_CONGESTION_CONTROL), whatever this machine's default is. The run records what its hosts used (config.json tcp_congestion_control). Default none."""
    ack_first: bool = Field(False)
    """Pure TCP ACKs ahead of data in every emulated host's own queue (its end of its access link), as a flow-fair host qdisc (fq, fq_codel) serves them; false: one FIFO, ACKs behind the host's outgoing data (10-30 ms at tens of Mbit/s, which leaves BBR window-limited: results/simulation/ring-loss.md; the default cubic does not need it). Default false."""


def fields_of(params: type) -> dict[str, Any]:
    """A ``Params`` model's fields but ``kind``, in declaration order (a base's first), each
    with its default, ``REQUIRED`` where it has none; with pydantic or without it (there
    the class attributes ``Field`` left are the defaults)."""
    fields = getattr(params, "model_fields", None)
    if fields is not None:
        return {name: REQUIRED if f.is_required() else f.get_default(call_default_factory=True)
                for name, f in fields.items() if name != "kind"}
    names = [n for klass in reversed(params.__mro__) for n in vars(klass).get("__annotations__", {})]
    return {n: getattr(params, n, REQUIRED) for n in dict.fromkeys(names) if n != "kind"}


#: ``Params`` model -> the ``NamedTopo`` class that builds it (``NamedTopo`` registers each
#: subclass as it is defined: ``topologies.base``).
_BUILDERS: dict[type, type] = {}


def register_builder(params: type, topo: type) -> None:
    """Makes ``topo`` the class whose ``build()`` a ``params`` model's graph comes from."""
    _BUILDERS[params] = topo


def _graph(params: type, values: dict[str, Any]) -> TopoGraph | None:
    topo = _BUILDERS.get(params)
    if topo is None:
        return None
    try:
        key = tuple(sorted(values.items()))
        hash(key)
    except TypeError:  # values that are no key (lists of real hosts): built each time
        return _build_graph(topo, tuple(values.items()))
    return _cached_graph(topo, key)


@functools.lru_cache(maxsize=64)
def _cached_graph(topo: type, key: tuple[tuple[str, Any], ...]) -> TopoGraph | None:
    return _build_graph(topo, key)


def _build_graph(topo: type, items: tuple[tuple[str, Any], ...]) -> TopoGraph | None:
    try:
        return topo(prefix="", **dict(items)).graph()
    except (ValueError, TypeError, NotImplementedError):  # values its build() refuses
        return None


def workers(n: int) -> list[str]:
    return [f"w{i}" for i in range(n)]


def cross(n: int) -> list[str]:
    return [f"x{i}" for i in range(n)]
