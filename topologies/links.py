"""Shaped links and routers: the Mininet node and link classes the topologies build with.

Why this exists: Mininet's own ``TCLink``/``TCIntf`` always puts the queue size (and delay,
loss) into a *netem* qdisc.  The kernels we build on have no ``sch_netem``, so a TCLink with
``max_queue_size`` fails there.  ``ShapedLink`` is a plain veth pair whose two ends are
shaped by our own tc tree (``topologies.shaping``): HTB root, one class at the link rate, a
pfifo leaf holding ``max_queue_size`` packets, and netem below the class only when delay,
jitter or loss are asked for and the kernel has it.  Both ends are shaped, so both
directions of a link see the same rate and queue.

Apart from ``topologies.base`` because these import Mininet's node and link modules
(~0.1 s), which describing a topology (names, parameters) does not need.
"""

from __future__ import annotations

import os
import sys

from mininet.link import Intf, Link
from mininet.node import Node

try:  # the package is installed editable; `mn --custom` runs from the repository root
    from topologies import shaping
except ImportError:  # pragma: no cover - only when mn runs outside an installed checkout
    sys.path.insert(0, os.getcwd())
    from topologies import shaping


_RC_MARK = "__netsense_rc="


def run_checked(node, command: str) -> tuple[int, str]:
    """Run a command in a node's shell; its exit status and what it printed.

    Why not "any output means failure": iproute2 prints warnings on success -- e.g. "Dump
    was interrupted and may be inconsistent." when another run adds interfaces while tc
    or ip dumps the link table (sweeps on Ray build networks concurrently). The status,
    not the text, says whether the command failed; the text goes into the error.
    """
    out = node.cmd(f"{command}; echo {_RC_MARK}$?")
    text, sep, tail = out.rpartition(_RC_MARK)
    if not sep:  # the marker never came back: the shell itself failed
        return 1, out.strip()
    try:
        rc = int(tail.strip().split()[0])
    except (IndexError, ValueError):
        rc = 1
    return rc, text.strip()


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
                rc, out = run_checked(self, "tc " + line)
                if rc != 0:
                    raise RuntimeError(f"tc failed on {self.name} (exit {rc}): tc {line}: {out}")
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
            rc, out = run_checked(self, "ip route replace " + route)
            if rc != 0:
                raise RuntimeError(f"route on {self.name} failed (exit {rc}): {route}: {out}")
        return result
