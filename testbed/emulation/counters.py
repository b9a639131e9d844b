"""Byte conservation: what each worker put on and took off the emulated network, next to
what its comm hook counted.

Why: a training job whose traffic does not cross the shaped links (NCCL over shared memory,
gloo bound to the wrong interface, a route around the bottleneck) still trains and still
reports "ok"; only the link counters tell. Every run reads each worker host's interface
counters in that host's own namespace (``/proc/<host shell pid>/net/dev``: the kernel's
per-namespace table, no subprocess) right before the workers start and right after they
end, and compares the bytes with the hook's ``bytes_sent`` summed over the rank's steps.

The expected band (``expected_band``), per rank, for ``W`` workers and ``H`` hook bytes:

* What the algorithms put on the wire per hook byte: gloo's ring all-reduce sends
  ``2(W-1)/W`` of the tensor, a ring all-gather ``(W-1)`` times this rank's input. A rank
  uses both kinds (top-k: all-gather; plain: all-reduce), so the band spans
  ``f_lo = 2(W-1)/W`` .. ``f_hi = W-1`` (both 1 for two workers, where the band is tight).
* Lower edge ``0.97 * f_lo * H``: every hook byte crosses the link; counters are L2 (frames
  with headers), so a bypassed job is far below (its link bytes are near zero).
* Upper edge ``1.25 * f_hi * H + per-collective + fixed``: Ethernet/IP/TCP headers are 66 B
  per full 1448 B segment (4.6 %), the acks this rank sends for what it receives (one 66 B
  ack per one or two segments, 2.3-4.6 %), gloo's per-message header, and retransmissions
  under congestion (a few % when cross traffic fills the queue): 25 % covers them. Every
  collective costs at least a segment and an ack each way per peer however small its
  payload (``PER_MESSAGE_B`` per message, ``2(W-1)`` messages for a ring collective), which
  dominates for sparse methods on small models. ``fixed`` covers what no hook counts: the
  rendezvous (TCPStore) and barriers, DDP's parameter broadcast at construction, the
  registration calibration of ``netsenseml``, evaluation sums and the stop-flag collectives
  (the latter two per step, within ``PER_MESSAGE_B`` per step).

A rank whose host is also a cross-traffic endpoint carries iperf3 bytes on the same
interface: it is reported but not judged (``judged: false``). The run's verdict needs at
least one judged rank; with all ranks excluded the verdict says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from testbed.common.metrics import num
from workloads.records import RankRecords

LOWER_FACTOR = 0.97
UPPER_FACTOR = 1.25
PER_MESSAGE_B = 512  # segment + its ack (66 B each) + gloo framing, generously (docs/measurements.md)
FIXED_B = 2_000_000  # rendezvous, barriers, calibration, eval sums: a run's worth, generously


@dataclass(frozen=True)
class IntfCounters:
    """One interface's kernel counters (L2 bytes: frames including their headers)."""

    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int


def read_counters(pid: int, intf: str) -> IntfCounters:
    """Counters of ``intf`` in the network namespace of process ``pid``.

    /proc/<pid>/net/dev shows the namespace of that process, so the host's interface is
    read without entering its namespace. Raises LookupError if it is not there.
    """
    want = intf + ":"
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        line = line.strip()
        if line.startswith(want):
            f = line[len(want):].split()
            return IntfCounters(int(f[0]), int(f[1]), int(f[8]), int(f[9]))
    raise LookupError(f"interface {intf} not found in the namespace of pid {pid}")


#: The TCP counters of a namespace read around a run: (file, section, field).
TCP_COUNTERS = (("snmp", "Tcp", "OutSegs"), ("snmp", "Tcp", "RetransSegs"),
                ("netstat", "TcpExt", "TCPTimeouts"), ("netstat", "TcpExt", "TCPLossProbes"),
                ("netstat", "TcpExt", "TCPSpuriousRTOs"))


def read_tcp_counters(pid: int) -> dict[str, int]:
    """The TCP stack's counters of the network namespace of ``pid`` (``/proc/<pid>/net/snmp``
    and ``netstat``: segments sent and retransmitted, retransmission timeouts, tail-loss
    probes). A worker host's namespace carries only its rank's traffic, so their
    differences over a run are the job's own retransmissions and timeouts."""
    out: dict[str, int] = {}
    for fname in ("snmp", "netstat"):
        lines = Path(f"/proc/{pid}/net/{fname}").read_text().splitlines()
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            section, names = head.split(":", 1)
            values = vals.split(":", 1)[1].split()
            table = dict(zip(names.split(), values, strict=False))
            for f, sec, field in TCP_COUNTERS:
                if f == fname and sec == section and field in table:
                    out[field] = int(table[field])
    return out


def wire_factors(world_size: int) -> tuple[float, float]:
    """(f_lo, f_hi): wire bytes per hook byte of a ring all-reduce and a ring all-gather."""
    if world_size < 2:
        return 0.0, 0.0
    return 2 * (world_size - 1) / world_size, float(world_size - 1)


def expected_band(hook_bytes: int, collectives: int, steps: int, world_size: int,
                  grad_bytes: int = 0) -> tuple[float, float]:
    """(low, high) link tx bytes of one rank that agree with its hook (module doc)."""
    f_lo, f_hi = wire_factors(world_size)
    messages = 2 * (world_size - 1) * (collectives + steps)
    low = LOWER_FACTOR * f_lo * hook_bytes
    high = (UPPER_FACTOR * f_hi * hook_bytes + PER_MESSAGE_B * messages + FIXED_B
            + 3 * f_hi * grad_bytes)
    return low, high


@dataclass
class RankBytes:
    """One rank's figures in summary.json's ``network.bytes``."""

    rank: int
    host: str
    intf: str
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int
    hook_bytes: int
    collectives: int
    steps: int
    ratio_tx: float | None  # link tx / hook bytes
    band_low: int
    band_high: int
    judged: bool
    ok: bool | None
    note: str = ""


def rank_bytes(rank: int, host: str, intf: str, before: IntfCounters, after: IntfCounters,
               hook_bytes: int, collectives: int, steps: int, world_size: int,
               grad_bytes: int = 0, cross_endpoint: bool = False) -> RankBytes:
    """Compares one rank's link bytes with its hook's (see the module doc for the band)."""
    tx = after.tx_bytes - before.tx_bytes
    rx = after.rx_bytes - before.rx_bytes
    low, high = expected_band(hook_bytes, collectives, steps, world_size, grad_bytes)
    ratio = tx / hook_bytes if hook_bytes > 0 else None
    judged = not cross_endpoint and world_size > 1
    ok: bool | None = (low <= tx <= high) if judged else None
    note = ""
    if cross_endpoint:
        note = "host is a cross-traffic endpoint: its interface also carries iperf3 bytes"
    elif world_size < 2:
        note = "a single worker sends nothing over the network"
    elif not ok:
        where = "below" if tx < low else "above"
        note = f"link tx {tx} B is {where} the expected band [{low:.0f}, {high:.0f}] B"
    return RankBytes(rank, host, intf, tx, rx, after.tx_packets - before.tx_packets,
                     after.rx_packets - before.rx_packets, hook_bytes, collectives, steps,
                     None if ratio is None else round(ratio, 4), int(low), int(high), judged,
                     ok, note)


class HookTotals(NamedTuple):
    bytes_sent: int
    collectives: int
    steps: int


def hook_totals(records: list[dict[str, Any]]) -> HookTotals:
    """What the hook counted, summed over one rank's step records (raw JSON)."""
    steps = RankRecords.parse(records).steps
    sent = sum(st.bytes_sent or 0 for st in steps)
    colls = sum(int(num(st.stats.get("collectives")) or 0) for st in steps)
    return HookTotals(sent, colls, len(steps))


def verdict(ranks: list[RankBytes], world_size: int) -> tuple[dict[str, Any], list[str]]:
    """summary.json's ``network.bytes`` block and the warnings it raises (may be empty)."""
    judged = [r for r in ranks if r.judged]
    warnings: list[str] = []
    bad = [r for r in judged if not r.ok]
    for r in bad:
        if r.tx_bytes < 0.1 * r.band_low:
            warnings.append(
                f"byte conservation: rank {r.rank}'s training traffic did not cross the "
                f"emulated link {r.intf} (link tx {r.tx_bytes} B, hook counted "
                f"{r.hook_bytes} B): the network conditions were not applied to it")
        else:
            warnings.append(f"byte conservation: rank {r.rank}: {r.note}")
    if ranks and not judged and any(r.hook_bytes for r in ranks):
        status = "unjudged"
    else:
        status = "ok" if not bad else "violated"
    block = {
        "status": status,
        "band": {"lower_factor": LOWER_FACTOR, "upper_factor": UPPER_FACTOR,
                 "per_message_b": PER_MESSAGE_B, "fixed_b": FIXED_B,
                 "wire_factors": list(wire_factors(world_size))},
        "ranks": [asdict(r) for r in ranks],
    }
    return block, warnings
