"""Cross-traffic and bandwidth traces: what the timeline does to the network.

Two jobs live here:

* **Trace parsing.** A bandwidth trace becomes a list of ``(seconds, Mbit/s)`` rate
  changes. Two formats: a CSV of ``time,rate`` (seconds, Mbit/s), and Mahimahi's
  packet-delivery traces, where each line is a millisecond timestamp at which one
  MTU-sized packet (1500 bytes) may leave; counting timestamps per bin gives a rate.
* **iperf3 cross-traffic.** Competing TCP flows between emulated hosts, started and
  stopped by timeline events. An iperf3 server serves one test at a time and a client's
  ``-P`` is fixed when it starts, so every client process gets its own server port; a
  ramp that adds streams step by step starts one more client per step carrying the
  increment. All servers are started (and waited for) before training begins, so a
  cross-traffic event at run time only costs one process spawn. Processes are started
  through ``Emulation.popen`` (own process group, tracked) and stopped by their PID.
"""

from __future__ import annotations

import csv
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import IO, Any

MTU_BYTES = 1500
IPERF_BASE_PORT = 5301
IPERF_LONG_S = 86400  # clients run until stopped


class TraceError(ValueError):
    """A trace file that cannot be parsed; message names file and line."""


def parse_trace(path: Path, fmt: str, *, bin_ms: int = 1000) -> list[tuple[float, float]]:
    """Parse a trace into ``[(t_seconds, mbit), ...]`` sorted by time, starting at 0."""
    if fmt == "csv":
        return _parse_csv(path)
    if fmt == "mahimahi":
        return _parse_mahimahi(path, bin_ms)
    raise TraceError(f"{path.name}: unknown trace format {fmt!r}; accepted: csv, mahimahi")


def _parse_csv(path: Path) -> list[tuple[float, float]]:
    rows: list[tuple[float, float]] = []
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            cells = [c.strip() for c in row]
            if not cells or not any(cells) or cells[0].startswith("#"):
                continue
            if len(cells) < 2:
                raise TraceError(f"{path.name} line {lineno}: expected 'time,rate'")
            try:
                t, rate = float(cells[0]), float(cells[1])
            except ValueError:
                if not rows and lineno == 1:
                    continue  # header
                raise TraceError(
                    f"{path.name} line {lineno}: not numbers: {','.join(cells[:2])!r}"
                ) from None
            if t < 0 or rate < 0:
                raise TraceError(f"{path.name} line {lineno}: negative time or rate")
            if rows and t < rows[-1][0]:
                raise TraceError(f"{path.name} line {lineno}: time goes backwards")
            rows.append((t, rate))
    if not rows:
        raise TraceError(f"{path.name}: no 'time,rate' rows")
    return rows


def _parse_mahimahi(path: Path, bin_ms: int) -> list[tuple[float, float]]:
    stamps: list[int] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                ms = int(line)
            except ValueError:
                raise TraceError(
                    f"{path.name} line {lineno}: expected an integer millisecond timestamp"
                ) from None
            if ms < 0 or (stamps and ms < stamps[-1]):
                raise TraceError(f"{path.name} line {lineno}: timestamps must not decrease")
            stamps.append(ms)
    if not stamps:
        raise TraceError(f"{path.name}: empty Mahimahi trace")
    n_bins = stamps[-1] // bin_ms + 1
    counts = [0] * n_bins
    for ms in stamps:
        counts[ms // bin_ms] += 1
    per_bin_to_mbit = MTU_BYTES * 8 / (bin_ms / 1000.0) / 1e6
    return [(i * bin_ms / 1000.0, c * per_bin_to_mbit) for i, c in enumerate(counts)]


def trace_rate_changes(
    rows: list[tuple[float, float]],
    *,
    scale: float = 1.0,
    min_mbit: float = 0.1,
    duration_s: float | None = None,
    period_s: float | None = None,
) -> list[tuple[float, float]]:
    """Rate changes to apply: scaled, floored, repeated rates dropped, looped to duration.

    The loop period is the trace's last time plus one step (the last row holds for one
    interval), or ``period_s`` if given.
    """
    if not rows:
        return []
    if period_s is None:
        last = rows[-1][0]
        step = rows[-1][0] - rows[-2][0] if len(rows) > 1 else 1.0
        period_s = last + max(step, 1e-3)
    limit = duration_s if duration_s is not None else period_s - 1e-9
    out: list[tuple[float, float]] = []
    offset = 0.0
    while True:
        for t, rate in rows:
            when = offset + t
            if when > limit:
                return out
            value = max(rate * scale, min_mbit)
            if not out or abs(out[-1][1] - value) > 1e-9:
                out.append((round(when, 6), value))
        offset += period_s
        if duration_s is None:
            return out


# --------------------------------------------------------------------------- iperf3


@dataclass
class _Slot:
    """One iperf3 client/server pair of a flow group."""

    streams: int
    port: int
    bitrate_mbit: float | None = None
    server: Popen | None = None
    client: Popen | None = None


@dataclass
class _Group:
    id: str
    src: str
    dst: str
    slots: list[_Slot] = field(default_factory=list)


def _listening(pid: int, port: int) -> bool:
    """Is a TCP socket listening on ``port`` in the network namespace of ``pid``?

    /proc/<pid>/net/tcp* shows the sockets of that process's namespace, so this needs no
    process spawn inside the namespace.
    """
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(want) and parts[3] == "0A":
                        return True
        except OSError:
            continue
    return False


class CrossTraffic:
    """iperf3 flow groups between emulated hosts, by id.

    ``plan(id, src, dst, [streams...])`` reserves one server port per client process;
    ``start_servers()`` starts all servers and waits until they listen;
    ``start_slot(id, k)`` starts the k-th client; ``stop(id)`` kills a group's clients.
    ``close()`` kills every process this object started (the emulation's stop() does
    too; both are idempotent).
    """

    def __init__(self, emu: Any, log_dir: Path) -> None:
        self.emu = emu
        self.log_dir = log_dir
        self.groups: dict[str, _Group] = {}
        self._next_port = IPERF_BASE_PORT
        self._files: list[IO[bytes]] = []

    # planning -------------------------------------------------------------------
    def plan(
        self, gid: str, src: str, dst: str, streams: list[int], bitrate_mbit: float | None = None
    ) -> None:
        group = self.groups.setdefault(gid, _Group(gid, src, dst))
        for n in streams:
            group.slots.append(_Slot(n, self._next_port, bitrate_mbit))
            self._next_port += 1

    @property
    def pids(self) -> list[int]:
        out = []
        for g in self.groups.values():
            for s in g.slots:
                out += [p.pid for p in (s.server, s.client) if p is not None]
        return out

    def _log(self, name: str) -> IO[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.log_dir / name, "wb")  # noqa: SIM115 - closed in close()
        self._files.append(fh)
        return fh

    # servers --------------------------------------------------------------------
    def start_servers(self, timeout_s: float = 20.0) -> None:
        pending: list[_Slot] = []
        for g in self.groups.values():
            for s in g.slots:
                log = self._log(f"{g.id}-{s.port}-server.log")
                s.server = self.emu.popen(
                    g.dst, ["iperf3", "-s", "-p", str(s.port)], stdout=log, stderr=log
                )
                pending.append(s)
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [s for s in pending if not _listening(s.server.pid, s.port)]
            for s in pending:
                if s.server.poll() is not None:
                    raise RuntimeError(
                        f"iperf3 server on port {s.port} exited with {s.server.returncode}"
                    )
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 servers not listening after {timeout_s:.0f} s")
            if pending:
                time.sleep(0.05)

    # clients --------------------------------------------------------------------
    def start_slot(self, gid: str, k: int) -> str:
        """Start the k-th client of group gid; returns a short description."""
        g = self.groups[gid]
        s = g.slots[k]
        argv = [
            "iperf3", "-c", self.emu.ip(g.dst), "-p", str(s.port), "-P", str(s.streams),
            "-t", str(IPERF_LONG_S), "-i", "0",
        ]
        if s.bitrate_mbit is not None:
            argv += ["-b", f"{s.bitrate_mbit}M"]
        log = self._log(f"{g.id}-{s.port}-client.log")
        s.client = self.emu.popen(g.src, argv, stdout=log, stderr=log)
        total = sum(x.streams for x in g.slots[: k + 1])
        return f"+{s.streams} streams (total {total}) pid {s.client.pid}"

    def stop(self, gid: str) -> str:
        g = self.groups[gid]
        n = 0
        for s in g.slots:
            if s.client is not None and s.client.poll() is None:
                self.emu.kill(s.client)
                n += 1
        return f"stopped {n} client(s)"

    def close(self) -> None:
        for g in self.groups.values():
            for s in g.slots:
                for p in (s.client, s.server):
                    if p is not None and p.poll() is None:
                        try:
                            self.emu.kill(p)
                        except Exception:  # noqa: BLE001 - teardown goes on regardless
                            _kill_pid(p.pid)
        for fh in self._files:
            fh.close()
        self._files.clear()


def _kill_pid(pid: int) -> None:
    """Last resort: SIGKILL a process group / pid we started ourselves."""
    import signal

    for fn in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            fn()
            return
        except OSError:
            continue
