"""Bottleneck truth: what the shaped links really did during a run, sampled at >= 10 Hz.

For each watched link both of its ends are sampled (each end shapes the direction that
leaves it: the switch end of ``w1`` shapes what flows toward w1). A row per end per
sample: the configured rate, the delivered rate (bytes the qdisc tree sent since the last
sample), the backlog (bytes, packets) and the cumulative drops and overlimits of the root
HTB qdisc, which accounts for its whole tree (a pfifo leaf's drop counts at the root too).

Where the numbers come from: ``tc -s -j qdisc show`` (iproute2's JSON, no text scraping),
one call per network namespace per sample: the switch ends of Mininet's LinuxBridge
switches are in the orchestrator's own namespace (one call covers them all, no ``dev``
filter), a host's end is in the host's namespace (``mnexec -a <host shell pid>``). The calls
of one sample run in parallel, so a sample costs one process spawn's latency, not the sum.

The sampler is a thread of the orchestrator (``BottleneckSampler``); it keeps its rows in
memory and ``stop()`` writes ``bottleneck.csv`` atomically. Times are seconds since the
run's time origin (the workers' launch), like steps.csv and events.csv.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netsenseml.dilation import NONE, Dilation
from testbed.common import files

COLUMNS = ["t", "link", "dev", "toward", "configured_mbit", "delivered_mbit",
           "backlog_bytes", "backlog_pkts", "drops", "drops_per_s", "overlimits",
           "overlimits_per_s", "sent_bytes"]
PERIOD_S = 0.1


@dataclass(frozen=True)
class LinkEnd:
    """One end of a watched link: its device, the namespace it lives in (a host shell's
    PID, or None for the orchestrator's own) and the node its egress goes toward."""

    link: str
    dev: str
    pid: int | None
    toward: str


def root_stats(qdiscs: list[dict[str, Any]], dev: str | None = None) -> dict[str, dict]:
    """Root qdisc statistics per device from ``tc -s -j qdisc show`` output.

    HTB adds its leaves' drops to its own; ``drops`` is nevertheless the largest count of
    any qdisc of the device, so a kernel that kept them in the leaf still shows them.
    """
    out: dict[str, dict] = {}
    leaf_drops: dict[str, int] = {}
    for q in qdiscs:
        name = q.get("dev", dev)
        if dev is not None and name != dev:
            continue
        leaf_drops[name] = max(leaf_drops.get(name, 0), int(q.get("drops", 0)))
        if q.get("root"):
            out[name] = dict(q)
    for name, q in out.items():
        q["drops"] = max(int(q.get("drops", 0)), leaf_drops.get(name, 0))
    return out


def _spawn(pid: int | None, dev: str | None) -> subprocess.Popen:
    argv = ["tc", "-s", "-j", "qdisc", "show"] + (["dev", dev] if dev else [])
    if pid is not None:
        argv = ["mnexec", "-a", str(pid)] + argv
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


class BottleneckSampler:
    """Samples ``ends`` every ``period_s`` in a thread until ``stop()``."""

    def __init__(self, ends: list[LinkEnd], rate_of: Any, path: Path, origin_wall: float,
                 period_s: float = PERIOD_S, dilation: Dilation | float = NONE) -> None:
        """``dilation``: the run's time dilation; rows are written in virtual time, rates and
        per-second counts (``netsenseml.dilation``)."""
        self.dilation = Dilation.of(dilation)
        self.ends = ends
        self.rate_of = rate_of  # link -> configured Mbit/s (changes with set_rate)
        self.path = path
        self.origin_wall = origin_wall
        self.period_s = period_s
        self.rows: list[dict[str, Any]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._prev: dict[str, tuple[float, dict]] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bottleneck", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a lost sample must not end the run
                self.errors += 1
            next_t += self.period_s
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (busy machine): keep the period, skip the backlog
                next_t = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def sample(self) -> None:
        """One sample of every end: one tc per namespace, in parallel."""
        by_ns: dict[int | None, list[LinkEnd]] = {}
        for end in self.ends:
            by_ns.setdefault(end.pid, []).append(end)
        procs = {pid: _spawn(pid, ends[0].dev if len(ends) == 1 else None)
                 for pid, ends in by_ns.items()}
        wall = time.time()
        for pid, proc in procs.items():
            out, _ = proc.communicate(timeout=5)
            ends = by_ns[pid]
            try:
                qdiscs = json.loads(out or b"[]")
            except json.JSONDecodeError:
                self.errors += 1
                continue
            single = ends[0].dev if len(ends) == 1 else None
            stats = root_stats(qdiscs, single)
            for end in ends:
                q = stats.get(end.dev)
                if q is None:
                    self.errors += 1
                    continue
                self._row(end, wall, q)

    def _row(self, end: LinkEnd, wall: float, q: dict[str, Any]) -> None:
        prev = self._prev.get(end.dev)
        self._prev[end.dev] = (wall, q)
        if prev is None:  # the first sample only sets the baseline of the deltas
            return
        dt = wall - prev[0]
        if dt <= 0:
            return
        p = prev[1]
        rate = self.rate_of(end.link)
        d = self.dilation
        self.rows.append({
            "t": round(d.virtual_s(wall - self.origin_wall), 4), "link": end.link, "dev": end.dev,
            "toward": end.toward,
            "configured_mbit": None if rate == float("inf") else d.virtual_mbit(rate),
            "delivered_mbit": round(d.virtual_mbit((q["bytes"] - p["bytes"]) * 8 / dt / 1e6), 4),
            "backlog_bytes": q.get("backlog", 0), "backlog_pkts": q.get("qlen", 0),
            "drops": q.get("drops", 0),
            "drops_per_s": round(d.virtual_per_s((q.get("drops", 0) - p.get("drops", 0)) / dt), 3),
            "overlimits": q.get("overlimits", 0),
            "overlimits_per_s": round(d.virtual_per_s((q.get("overlimits", 0) - p.get("overlimits", 0)) / dt), 3),
            "sent_bytes": q["bytes"],
        })

    def stop(self) -> dict[str, Any]:
        """Stops the thread, writes bottleneck.csv; returns facts for summary.json."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        files.write_csv(self.path, COLUMNS, self.rows)
        times = sorted({r["t"] for r in self.rows})
        hz = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else None
        return {"file": self.path.name, "links": sorted({e.link for e in self.ends}),
                "samples": len(times), "rate_hz": round(hz, 2) if hz else None,
                "sample_errors": self.errors}


def watched_links(links: list[str], rate_targets: list[str], cross: list[tuple[str, str]],
                  workers: list[str]) -> list[str]:
    """Links whose truth a run records.

    The dumbbell's ``bottleneck``; every link a ``set_rate`` event changes; the access links
    of cross-traffic endpoints (a flow toward a worker shares that worker's downlink; its
    source's uplink gives the cross traffic's own delivered rate). Without any of these,
    the first worker's access link (the training traffic's own path).
    """
    out: list[str] = []

    def add(name: str) -> None:
        if name in links and name not in out:
            out.append(name)

    add("bottleneck")
    for target in rate_targets:
        add(target)
    for src, dst in cross:
        add(dst)
        add(src)
    if not out and workers:
        add(workers[0])
    return out
