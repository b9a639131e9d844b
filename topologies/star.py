"""Star: every worker (and cross-traffic host) behind its own shaped access link to s0.

    w0 --[rate]--+
    w1 --[rate]--+-- s0 (Linux bridge)
    x0 --[rate]--+

Named links: "w0".."w{n-1}", "x0".. (each host's access link).

    mn --custom topologies/star.py --topo star,4,50 --switch lxbr --controller none
"""

from __future__ import annotations

try:
    from topologies._common import NamedTopo, check_count, check_queue
except ImportError:  # `mn --custom` from the repository root without the package installed
    import os
    import sys

    sys.path.insert(0, os.getcwd())
    from topologies._common import NamedTopo, check_count, check_queue


class StarTopo(NamedTopo):
    """n_workers workers and n_cross cross hosts, each on its own access link to one switch."""

    def build(self, n_workers=2, rate_mbit=100.0, queue_pkts=100, n_cross=0, prefix="",
              delay_ms=None, jitter_ms=None, loss_pct=None):
        self._init_naming(prefix)
        check_count("n_workers", n_workers, 1)
        check_count("n_cross", n_cross, 0)
        check_queue(queue_pkts)
        self.add_switch("s0")
        impair = {"delay_ms": delay_ms, "jitter_ms": jitter_ms, "loss_pct": loss_pct}
        for i in range(n_workers):
            w = self.add_worker(i)
            self.add_shaped_link(w, w, "s0", rate_mbit, queue_pkts, **impair)
        for i in range(n_cross):
            x = self.add_cross(i)
            self.add_shaped_link(x, x, "s0", rate_mbit, queue_pkts, **impair)
        self.validate_names()


topos = {"star": StarTopo}
