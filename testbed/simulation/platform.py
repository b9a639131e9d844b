"""SimGrid platforms for the testbed's topologies (star, dumbbell, leaf-spine) and for scale
(fat-tree, dragonfly), each built from one ``Fabric``.

Every emulated link is two simplex SimGrid links (one per direction, ``<name>:up`` from the
host or left side, ``<name>:down`` toward it), as an HTB tree shapes each direction of a
veth pair on its own; routes list them explicitly (a full zone), so that the links a flow
crosses are the emulation's: star ``a -> b`` is ``[a:up, b:down]``; dumbbell across the
bottleneck ``[a:up, bottleneck:up|down, b:down]``; leaf-spine across leaves ``[a:up,
l<i>-p<j>:up, l<k>-p<j>:down, b:down]`` with spine ``j`` picked by a fixed hash of the pair
(the emulation's ECMP next hops are a kernel hash too).

Fat-tree and dragonfly use SimGrid's own cluster zones (``create_fatTree_zone``,
``create_dragonfly_zone``, routing by SimGrid). The dragonfly is ``g`` groups of one chassis
of ``g`` routers (``g`` the smallest that holds the leaves): SimGrid 3.32's dragonfly
routing crashes the process (a segfault, no error) when a group has fewer routers than
there are groups, as in 5 groups of 4 routers, so the shape keeps to the one that holds.
A fat-tree has ``hosts_per_leaf`` hosts under each leaf and ``hosts_per_leaf / oversub`` spines, every link at the access rate, so
the leaf's uplinks carry ``1/oversub`` of what its hosts can send. Workers fill the first
``workers_per_leaf`` places of each leaf; the other places belong to another job
(``background`` of them per leaf send one bulk flow each to the next leaf, through the
over-subscribed uplinks the ring's inter-leaf flows use).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("star", "dumbbell", "leafspine", "fattree", "dragonfly")
HOST_SPEED = 1e9  # flop/s of one core: compute is entered as seconds x this speed


@dataclass(frozen=True)
class Fabric:
    """One network: its kind, how many workers and cross hosts, its links' rates (Mbit/s)."""

    kind: str
    workers: int
    rate_mbit: float  # access links (star: every link)
    cross: int = 0
    queue_pkts: int = 100
    bottleneck_mbit: float | None = None  # dumbbell
    n_left: int | None = None  # dumbbell: workers on the left switch
    leaves: int = 2  # leafspine
    spines: int = 2
    uplink_mbit: float | None = None  # leafspine uplinks (default: the access rate)
    hosts_per_leaf: int = 16  # fattree / dragonfly
    workers_per_leaf: int = 8
    oversub: float = 4.0
    background: int = 0  # fattree / dragonfly: bulk flows per leaf of another job
    link_latency_s: float = 50e-6  # per link, before SimGrid's latency factor

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fabric: unknown kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {self.workers}")
        if self.kind in ("fattree", "dragonfly"):
            if not 1 <= self.workers_per_leaf <= self.hosts_per_leaf:
                raise ValueError("workers_per_leaf: must be in 1..hosts_per_leaf")
            if self.background > self.hosts_per_leaf - self.workers_per_leaf:
                raise ValueError("background: at most hosts_per_leaf - workers_per_leaf")
            if self.oversub < 1 or self.hosts_per_leaf % max(1, round(self.spines_per_leaf)):
                raise ValueError("oversub: must be >= 1 and divide hosts_per_leaf")

    @property
    def spines_per_leaf(self) -> int:
        return max(1, round(self.hosts_per_leaf / self.oversub))

    @property
    def leaf_count(self) -> int:
        return max(2, math.ceil(self.workers / self.workers_per_leaf))


@dataclass
class Built:
    """What a platform build returns: hosts by name, the emulated links by direction."""

    hosts: dict[str, Any]
    workers: list[str]
    cross: list[str]
    links: dict[str, Any] = field(default_factory=dict)  # "<name>:up|down" -> simgrid.Link
    shaped: dict[str, float] = field(default_factory=dict)  # link key -> Mbit/s (HTB'd)
    route: Any = None  # (src, dst) -> list of link keys, for the explicit zones
    background: list[tuple[str, str]] = field(default_factory=list)


Route = Callable[[str, str], list[str]]
AddLink = Callable[[str, float], None]


def build(sg: Any, fab: Fabric) -> Built:
    """The platform in the current engine."""
    if fab.kind in ("fattree", "dragonfly"):
        return _cluster(sg, fab)
    root = sg.NetZone.create_full_zone("root")
    hosts: dict[str, Any] = {}
    workers = [f"w{i}" for i in range(fab.workers)]
    cross = [f"x{i}" for i in range(fab.cross)]
    for name in workers + cross:
        hosts[name] = root.create_host(name, HOST_SPEED).seal()
    b = Built(hosts, workers, cross)

    def link(name: str, mbit: float) -> None:
        for d in ("up", "down"):
            key = f"{name}:{d}"
            b.links[key] = root.create_link(key, mbit * 1e6 / 8).set_latency(
                fab.link_latency_s).seal()
            b.shaped[key] = mbit

    names = workers + cross
    for h in names:
        link(h, fab.rate_mbit)
    route = _ROUTES[fab.kind](fab, link)
    link_in_route = sg.LinkInRoute
    for a in names:
        for z in names:
            if a != z:
                root.add_route(hosts[a].netpoint, hosts[z].netpoint, None, None,
                               [link_in_route(b.links[k]) for k in route(a, z)], False)
    root.seal()
    b.route = route
    return b


def _star(fab: Fabric, link: AddLink) -> Route:
    """Every host's own link, both ways: ``a -> b`` is ``[a:up, b:down]``."""
    def route(a: str, z: str) -> list[str]:
        return [f"{a}:up", f"{z}:down"]
    return route


def _dumbbell(fab: Fabric, link: AddLink) -> Route:
    """The bottleneck between the two switches; the first ``n_left`` workers (default half)
    and the even cross hosts on the left."""
    n_left = fab.n_left if fab.n_left is not None else fab.workers // 2
    link("bottleneck", fab.bottleneck_mbit or fab.rate_mbit)

    def side(h: str) -> int:
        i = int(h[1:])
        return (0 if i < n_left else 1) if h[0] == "w" else i % 2

    def route(a: str, z: str) -> list[str]:
        mid = [] if side(a) == side(z) else [
            "bottleneck:up" if side(a) == 0 else "bottleneck:down"]
        return [f"{a}:up", *mid, f"{z}:down"]
    return route


def _leafspine(fab: Fabric, link: AddLink) -> Route:
    """Every leaf linked to every spine; workers fill the leaves in order, cross hosts go
    round them; a pair across leaves takes the spine a fixed hash picks (ECMP)."""
    per = max(1, math.ceil(fab.workers / fab.leaves))
    for i in range(fab.leaves):
        for j in range(fab.spines):
            link(f"l{i}-p{j}", fab.uplink_mbit or fab.rate_mbit)

    def leaf(h: str) -> int:
        return min(fab.leaves - 1, int(h[1:]) // per) if h[0] == "w" else int(h[1:]) % fab.leaves

    def route(a: str, z: str) -> list[str]:
        la, lz = leaf(a), leaf(z)
        if la == lz:
            return [f"{a}:up", f"{z}:down"]
        j = (int(a[1:]) * 31 + int(z[1:]) * 17 + (a[0] == "x")) % fab.spines
        return [f"{a}:up", f"l{la}-p{j}:up", f"l{lz}-p{j}:down", f"{z}:down"]
    return route


#: the explicit zones' routing, by kind: each adds its own links beyond the hosts'
_ROUTES: dict[str, Callable[[Fabric, AddLink], Route]] = {
    "star": _star, "dumbbell": _dumbbell, "leafspine": _leafspine}


def _cluster(sg: Any, fab: Fabric) -> Built:
    """Fat-tree or dragonfly from SimGrid's cluster zones; workers, cross and background
    hosts placed leaf by leaf (a leaf: ``hosts_per_leaf`` consecutive hosts)."""
    root = sg.NetZone.create_full_zone("root")
    made: list[Any] = []
    leaves = fab.leaf_count + (1 if fab.cross else 0)  # cross hosts: a leaf of their own

    def add_host(zone: Any, _coord: Any, ident: int) -> Any:
        h = zone.create_host(f"n{ident}", HOST_SPEED).seal()
        made.append(h)
        return h.netpoint, None

    bw = fab.rate_mbit * 1e6 / 8
    cb = sg.ClusterCallbacks(add_host, None, None)
    if fab.kind == "fattree":
        params = sg.FatTreeParams(2, [fab.hosts_per_leaf, leaves], [1, fab.spines_per_leaf],
                                  [1, 1])
        zone = sg.NetZone.create_fatTree_zone("fabric", root, params, cb, bw,
                                              fab.link_latency_s, sg.Link.SharingPolicy.SHARED)
    else:  # dragonfly: g groups of one chassis of g routers; a router is a "leaf"
        groups = max(2, math.ceil(math.sqrt(leaves)))
        params = sg.DragonflyParams((groups, 1), (1, 1), (groups, fab.spines_per_leaf),
                                    fab.hosts_per_leaf)
        zone = sg.NetZone.create_dragonfly_zone("fabric", root, params, cb, bw,
                                                fab.link_latency_s,
                                                sg.Link.SharingPolicy.SHARED)
    zone.seal()
    root.seal()
    made.sort(key=lambda h: int(h.name[1:]))
    hosts: dict[str, Any] = {}
    workers, background = [], []
    per, k = fab.workers_per_leaf, fab.hosts_per_leaf
    leaf_of_worker = [min(i // per, fab.leaf_count - 1) for i in range(fab.workers)]
    slot = [0] * fab.leaf_count
    for i, leaf in enumerate(leaf_of_worker):
        name = f"w{i}"
        hosts[name] = made[leaf * k + slot[leaf]]
        slot[leaf] += 1
        workers.append(name)
    for leaf in range(fab.leaf_count):
        for j in range(fab.background):
            src = made[leaf * k + k - 1 - j]
            dst = made[((leaf + 1) % fab.leaf_count) * k + k - 1 - j]
            hosts[src.name], hosts[dst.name] = src, dst
            background.append((src.name, dst.name))
    cross = []
    for i in range(fab.cross):
        name = f"x{i}"
        hosts[name] = made[fab.leaf_count * k + i]
        cross.append(name)
    return Built(hosts, workers, cross, background=background)
