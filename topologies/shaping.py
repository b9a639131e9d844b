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


#: Ceiling of the two classes ``ack_first_lines`` adds below class 1:1: above any link rate
#: (``topologies.spec``: at most 100000 Mbit/s), so their parent alone sets the rate, also
#: after `tc class change` moved it.
_CHILD_CEIL_MBIT = 100000


def ack_first_lines(dev: str, queue_pkts: int) -> list[str]:
    """tc lines that put pure TCP ACKs ahead of everything else in an existing tree
    (``shape_lines`` without netem) on ``dev``: class 1:1 gets two children, 1:10 (prio 0)
    for IPv4 TCP packets under 128 bytes whose flags are ACK alone, 1:20 (prio 1) for the
    rest, each with its own pfifo of ``queue_pkts``; both borrow everything from 1:1 (a
    token rate of 8 kbit of their own), ACKs first.

    Why: a real host's queue is flow-fair (fq, fq_codel: a sparse flow such as the ACKs of
    an incoming transfer is served ahead of a bulk flow's backlog); one pfifo makes those
    ACKs wait behind the host's own outgoing data, which at tens of Mbit/s is 10-30 ms, and
    BBR, whose window is the path's min RTT (~10 us on veth) times the rate plus a small
    allowance, then sits window-limited below the link (``results/simulation/ring-loss.md``). This
    kernel has no fq or fq_codel, so the priority is HTB's own (a u32 filter).
    """
    if queue_pkts < 1:
        raise ValueError(f"queue_pkts: must be >= 1, got {queue_pkts!r}")
    burst = burst_bytes(_CHILD_CEIL_MBIT / 1000)  # one GSO segment plus a frame
    child = (f"rate 8kbit ceil {_CHILD_CEIL_MBIT}mbit burst {burst} cburst {burst} "
             f"quantum {MTU_FRAME}")
    return [
        f"class add dev {dev} parent 1:1 classid 1:10 htb {child} prio 0",
        f"class add dev {dev} parent 1:1 classid 1:20 htb {child} prio 1",
        f"qdisc add dev {dev} parent 1:10 handle 11: pfifo limit {queue_pkts}",
        f"qdisc add dev {dev} parent 1:20 handle 12: pfifo limit {queue_pkts}",
        f"filter add dev {dev} parent 1: protocol all prio 2 u32 match u32 0 0 flowid 1:20",
        # IPv4 (no options: the TCP flags are byte 33), TCP, total length < 128, flags == ACK
        f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff "
        f"match u16 0x0000 0xff80 at 2 match u8 0x10 0xff at 33 flowid 1:10",
    ]


def change_rate_line(dev: str, rate_mbit: float) -> str:
    """tc argument line that changes the rate of an existing tree in place."""
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit: must be > 0, got {rate_mbit!r}")
    return f"class change dev {dev} parent 1: classid 1:1 htb {_class_args(rate_mbit)}"
