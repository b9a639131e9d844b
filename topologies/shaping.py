"""tc command lines that shape one interface: HTB rate + pfifo queue (+ netem if asked).

Why our own tc and not Mininet's TCIntf: TCIntf puts the queue limit into a netem qdisc,
which does not exist on kernels without sch_netem.  The tree built here is

    root 1: htb default 1  ->  class 1:1 htb rate R ceil R  ->  10: pfifo limit Q
                                                      (or 10: netem ... limit Q)

so the rate and the queue size work on any kernel with HTB; netem replaces the pfifo leaf
only when delay, jitter or loss are requested. Whether the kernel has sch_netem is checked
before anything is built (``testbed.emulation.kernel.require_netem``); run on its own (``mn
--custom``) a missing netem shows as the failing tc command.

Quantum and burst are set explicitly: HTB derives quantum as rate/r2q and warns "quantum
is big" above 200 kB at high rates; a quantum of at least one MTU and at most 64 kB is right
for a single class.  The burst must cover what the link sends between two timer ticks or
HTB under-shoots at high rates; with TSO/GSO on veth a single skb can be 64 kB, so the
burst is at least that.  Rate changes use `tc class change`, which keeps the queue and the
flows in it: no packet is dropped by the change itself.
"""

from __future__ import annotations

DEFAULT_QUEUE_PKTS = 100
MTU_FRAME = 1514
_GSO_MAX = 65536


def _rate_bytes(rate_mbit: float) -> float:
    return rate_mbit * 1e6 / 8


def burst_bytes(rate_mbit: float) -> int:
    """Bucket size: 2 ms worth of the rate, at least one GSO segment plus a frame."""
    return int(max(_rate_bytes(rate_mbit) * 0.002, _GSO_MAX + MTU_FRAME))


def quantum_bytes(rate_mbit: float) -> int:
    return int(min(max(_rate_bytes(rate_mbit) / 10, MTU_FRAME), _GSO_MAX))


def _class_args(rate_mbit: float) -> str:
    burst = burst_bytes(rate_mbit)
    return (f"rate {rate_mbit:.6g}mbit ceil {rate_mbit:.6g}mbit burst {burst} cburst {burst} "
            f"quantum {quantum_bytes(rate_mbit)}")


def netem_args(delay_ms=None, jitter_ms=None, loss_pct=None) -> str:
    """netem options for the given impairments ('' if none requested)."""
    parts = []
    if delay_ms is not None or jitter_ms is not None:
        parts.append(f"delay {float(delay_ms or 0):g}ms")
        if jitter_ms is not None:
            parts.append(f"{float(jitter_ms):g}ms")
    if loss_pct is not None:
        parts.append(f"loss {float(loss_pct):g}%")
    return " ".join(parts)


def shape_lines(dev: str, rate_mbit: float, queue_pkts: int, delay_ms=None, jitter_ms=None,
                loss_pct=None) -> list[str]:
    """tc argument lines (without the leading 'tc') that build the tree on `dev`.
    """
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit: must be > 0, got {rate_mbit!r}")
    if queue_pkts < 1:
        raise ValueError(f"queue_pkts: must be >= 1, got {queue_pkts!r}")
    lines = [
        f"qdisc replace dev {dev} root handle 1: htb default 1 r2q 10",
        f"class add dev {dev} parent 1: classid 1:1 htb {_class_args(rate_mbit)}",
    ]
    impair = netem_args(delay_ms, jitter_ms, loss_pct)
    if impair:
        lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: netem {impair} "
                     f"limit {queue_pkts}")
    else:
        lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: pfifo limit {queue_pkts}")
    return lines


def change_rate_line(dev: str, rate_mbit: float) -> str:
    """tc argument line that changes the rate of an existing tree in place."""
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit: must be > 0, got {rate_mbit!r}")
    return f"class change dev {dev} parent 1: classid 1:1 htb {_class_args(rate_mbit)}"
