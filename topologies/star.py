"""Star: every worker (and cross-traffic host) behind its own shaped access link to s0.

    w0 --[rate]--+
    w1 --[rate]--+-- s0 (Linux bridge)
    x0 --[rate]--+

Named links: "w0".."w{n-1}", "x0".. (each host's access link).

    mn --custom topologies/star.py --topo star,4,50 --switch lxbr --controller none
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


class StarParams(spec.ShapedParams):
    """n workers and n_cross cross-traffic hosts on one switch; every access link shaped."""

    n_workers: int = Field(gt=0, le=64)
    """Training workers w0..w(N-1), one link each to the switch."""
    n_cross: int = Field(1, ge=0, le=16)
    """Cross-traffic hosts x0.., one link each to the switch. Default 1."""
    rate_mbit: float = Field(ge=0.01, le=100000)
    """Rate of every host's link, Mbit/s."""

    def worker_hosts(self) -> list[str]:
        return spec.workers(self.n_workers)

    def cross_hosts(self) -> list[str]:
        return spec.cross(self.n_cross)

    def link_rates(self) -> dict[str, float | None]:
        return {h: self.rate_mbit for h in self.hosts()}

    def probe_pairs(self) -> dict[str, tuple[str, str]]:
        return self.access_pairs()  # all hosts share s0: any other host


class StarTopo(NamedTopo):
    """n_workers workers and n_cross cross hosts, each on its own access link to one switch."""

    Params = StarParams

    positional = ("n_workers", "rate_mbit", "queue_pkts", "n_cross")

    def build(self, *args, prefix="", **given):
        p = self.values(args, given)
        self.init_naming(prefix)
        check_count("n_workers", p.n_workers, 1)
        check_count("n_cross", p.n_cross, 0)
        check_queue(p.queue_pkts)
        self.add_switch("s0")
        impair = {"delay_ms": p.delay_ms, "jitter_ms": p.jitter_ms, "loss_pct": p.loss_pct}
        for i in range(p.n_workers):
            w = self.add_worker(i)
            self.add_shaped_link(w, w, "s0", p.rate_mbit, p.queue_pkts, **impair)
        for i in range(p.n_cross):
            x = self.add_cross(i)
            self.add_shaped_link(x, x, "s0", p.rate_mbit, p.queue_pkts, **impair)
        self.validate_names()


topos = {"star": StarTopo}
