"""Dumbbell: workers split over two switches joined by one shaped bottleneck.

    w0..w{L-1}, x0, x2.. --[access]-- s0 ==[bottleneck]== s1 --[access]-- w{L}.., x1, x3..

Cross-traffic hosts alternate sides (x0 left, x1 right, ...) so that traffic between x0 and
x1 crosses the bottleneck.  Named links: "bottleneck", "w0".., "x0".. (access links).

    mn --custom topologies/dumbbell.py --topo dumbbell,2,2,50 --switch lxbr --controller none
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


class DumbbellParams(spec.ShapedParams):
    """Workers split over two switches joined by one shaped bottleneck."""

    n_left: int = Field(gt=0, le=32)
    """Training workers on the left switch."""
    n_right: int = Field(gt=0, le=32)
    """Training workers on the right switch."""
    n_cross: int = Field(2, ge=0, le=16)
    """Cross-traffic hosts, split over both sides. Default 2."""
    bottleneck_mbit: float = Field(ge=0.01, le=100000)
    """Rate of the link between the two switches, Mbit/s."""
    access_mbit: float = Field(1000.0, ge=0.01, le=100000)
    """Rate of every host's link to its switch, Mbit/s. Default 1000."""

    def worker_hosts(self) -> list[str]:
        return spec.workers(self.n_left + self.n_right)

    def cross_hosts(self) -> list[str]:
        return spec.cross(self.n_cross)

    def link_rates(self) -> dict[str, float | None]:
        return {"bottleneck": self.bottleneck_mbit,
                **{h: self.access_mbit for h in self.hosts()}}

    def probe_pairs(self) -> dict[str, tuple[str, str]]:
        pairs = self.access_pairs()  # a peer on the host's own switch
        pairs["bottleneck"] = ("w0", f"w{self.n_left}")  # first left to first right worker
        return pairs


class DumbbellTopo(NamedTopo):
    """n_left + n_right workers, n_cross cross hosts, one shaped bottleneck s0-s1.

    access_mbit=None leaves access links unshaped (only the bottleneck is shaped).
    Delay/jitter/loss apply to the bottleneck only.
    """

    Params = DumbbellParams

    positional = ("n_left", "n_right", "bottleneck_mbit", "access_mbit", "queue_pkts",
                  "n_cross")

    def build(self, *args, prefix="", **given):
        p = self.values(args, given)
        self.init_naming(prefix)
        check_count("n_left", p.n_left, 1)
        check_count("n_right", p.n_right, 1)
        check_count("n_cross", p.n_cross, 0)
        check_queue(p.queue_pkts)
        self.add_switch("s0")
        self.add_switch("s1")
        self.add_shaped_link("bottleneck", "s0", "s1", p.bottleneck_mbit, p.queue_pkts,
                             delay_ms=p.delay_ms, jitter_ms=p.jitter_ms, loss_pct=p.loss_pct)
        for i in range(p.n_left + p.n_right):
            w = self.add_worker(i)
            self.add_shaped_link(w, w, "s0" if i < p.n_left else "s1", p.access_mbit,
                                 p.queue_pkts)
        for i in range(p.n_cross):
            x = self.add_cross(i)
            self.add_shaped_link(x, x, "s0" if i % 2 == 0 else "s1", p.access_mbit,
                                 p.queue_pkts)
        self.validate_names()


topos = {"dumbbell": DumbbellTopo}
