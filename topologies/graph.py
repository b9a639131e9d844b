"""The graph a topology's ``build()`` makes, in logical names, and what follows from it.

Why derived and not declared: a topology's paths (which named links traffic between two
hosts crosses) and its hosts' places (which switch or leaf a host hangs off) are facts of
the graph its ``build()`` makes; written a second time by hand beside ``build()`` they can
drift from it silently. So ``topologies.base.NamedTopo.graph()`` reads them off the built
``Topo`` (pure Python: Mininet's ``Topo`` only records nodes and links, nothing runs), and
``topologies.spec.TopologyParams`` asks this graph (``path_links``, ``access_pairs``).

Paths are every shortest path: where several tie (a leaf-spine fabric's spines, which ECMP
hashes flows over), a flow may cross any of their links, so all of them count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopoGraph:
    """Hosts (rank order: workers, then cross hosts) and named links ``(name, a, b)``
    between logical nodes (``w0``, ``s0``, ``l1``, ...)."""

    hosts: tuple[str, ...]
    links: tuple[tuple[str, str, str], ...]
    _adjacent: dict[str, list[tuple[str, str]]] = field(default_factory=dict, compare=False,
                                                        repr=False)

    def __post_init__(self) -> None:
        for name, a, b in self.links:
            self._adjacent.setdefault(a, []).append((b, name))
            self._adjacent.setdefault(b, []).append((a, name))

    def _distances(self, start: str) -> dict[str, int]:
        dist = {start: 0}
        todo = deque([start])
        while todo:
            node = todo.popleft()
            for nxt, _ in self._adjacent.get(node, ()):
                if nxt not in dist:
                    dist[nxt] = dist[node] + 1
                    todo.append(nxt)
        return dist

    def path_links(self, src: str, dst: str) -> set[str] | None:
        """The named links on every shortest path from ``src`` to ``dst`` (None: a host
        the graph does not hold, or no path)."""
        if src not in self._adjacent or dst not in self._adjacent:
            return None
        d_src, d_dst = self._distances(src), self._distances(dst)
        if dst not in d_src:
            return None
        length = d_src[dst]
        out = set()
        for name, a, b in self.links:
            for u, v in ((a, b), (b, a)):
                if u in d_src and v in d_dst and d_src[u] + 1 + d_dst[v] == length:
                    out.add(name)
        return out

    def attached(self, host: str) -> str | None:
        """The node a host's one link leads to (its switch or leaf); None for a host with
        no link or several."""
        ends = self._adjacent.get(host, [])
        return ends[0][0] if len(ends) == 1 else None

    def access_pairs(self, hosts: Iterable[str] | None = None) -> dict[str, tuple[str, str]]:
        """Probe pairs for hosts' own links: toward host ``h`` from the first other host
        (in ``hosts`` order, the graph's by default) on the same switch or leaf, so only
        the two hosts' links lie on the path; a host alone on its node has none."""
        hosts = list(self.hosts if hosts is None else hosts)
        pairs: dict[str, tuple[str, str]] = {}
        for h in hosts:
            node = self.attached(h)
            peers = [p for p in hosts if p != h and node is not None and self.attached(p) == node]
            if peers:
                pairs[h] = (peers[0], h)
        return pairs
