"""iperf3 cross-traffic: competing TCP flows between emulated hosts.

Flows are started and stopped by timeline events. An iperf3 server serves one test at a
time and a client's ``-P`` is fixed when it starts, so every client process gets its own
server port; a ramp that adds streams step by step starts one more client per step
carrying the increment. All servers are started (and waited for) before training begins,
so a cross-traffic event at run time only costs one process spawn. Processes are started
through ``Emulation.popen`` (own process group, tracked) and stopped by their PID.
Each client writes its own JSON report (``-J``, intervals every ``REPORT_INTERVAL_S``) into
the run folder's ``cross/`` (``reports()`` summarises them: achieved rate, retransmits).
A scenario's ``topology.congestion_control`` is set in every host's namespace before the
servers start, and passed to each client as ``-C`` besides.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import IO, Any

from testbed.emulation import netns

IPERF_BASE_PORT = 5301
IPERF_LONG_S = 86400  # clients run until stopped
REPORT_INTERVAL_S = 0.5  # iperf3's own rate report: the cross traffic's achieved rate over time


# --------------------------------------------------------------------------- iperf3


@dataclass
class _Slot:
    """One iperf3 client/server pair of a flow group."""

    streams: int
    port: int
    bitrate_mbit: float | None = None
    server: Popen | None = None
    client: Popen | None = None
    started_wall: float | None = None


@dataclass
class _Group:
    id: str
    src: str
    dst: str
    slots: list[_Slot] = field(default_factory=list)


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
                log = self._log(f"{g.id}-{s.port}-server.json")
                s.server = self.emu.popen(
                    g.dst, ["iperf3", "-s", "-p", str(s.port), "-J", "-i",
                            f"{REPORT_INTERVAL_S:g}"], stdout=log, stderr=log
                )
                pending.append(s)
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = [s for s in pending if not netns.listening(s.server.pid, s.port)]
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
            "-t", str(IPERF_LONG_S), "-i", f"{REPORT_INTERVAL_S:g}", "-J",
        ]
        if s.bitrate_mbit is not None:
            argv += ["-b", f"{s.bitrate_mbit}M"]
        cc = getattr(self.emu, "congestion_control", None)
        if cc is not None:  # the namespace has it already; -C says so in the report too
            argv += ["-C", cc]
        log = self._log(f"{g.id}-{s.port}-client.json")
        s.started_wall = time.time()
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


    def reports(self) -> list[dict[str, Any]]:
        """Each started client's own JSON report, summarised (after ``close()``).

        iperf3 writes its report when it is stopped (SIGTERM: the report has an "error"
        saying so, and ``end.sum_sent``). ``achieved_mbit``/``intervals`` are the sender's
        (bytes that left the client socket, retransmissions included: ``retransmits``);
        ``received_mbit``/``received_intervals`` the receiving server's, what crossed the
        network: the cross traffic's share of the bottleneck.
        """
        out = []
        for g in self.groups.values():
            for s in g.slots:
                if s.client is None:
                    continue
                path = self.log_dir / f"{g.id}-{s.port}-client.json"
                row: dict[str, Any] = {"id": g.id, "src": g.src, "dst": g.dst, "port": s.port,
                                       "streams": s.streams, "report": path.name,
                                       "started_wall": s.started_wall}
                out.append(row)
                try:
                    data = json.loads(path.read_text() or "{}")
                    sent = data["end"]["sum_sent"]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    row["error"] = f"no report: {type(exc).__name__}"
                    continue
                received = _first_test(self.log_dir / f"{g.id}-{s.port}-server.json")
                if received is not None:
                    row["received_report"] = f"{g.id}-{s.port}-server.json"
                    row["received_mbit"] = round(
                        received.get("end", {}).get("sum_received", {})
                        .get("bits_per_second", 0.0) / 1e6, 3)
                    row["received_intervals"] = _intervals(received)
                row.update(seconds=round(sent.get("seconds", 0.0), 3),
                           bytes=int(sent.get("bytes", 0)),
                           achieved_mbit=round(sent.get("bits_per_second", 0.0) / 1e6, 3),
                           retransmits=sent.get("retransmits"),
                           intervals=_intervals(data))
        return out


def _intervals(report: dict[str, Any]) -> list[tuple[float, float, float]]:
    """(start s, end s, Mbit/s) of an iperf3 JSON report's interval sums."""
    return [(round(iv["sum"]["start"], 3), round(iv["sum"]["end"], 3),
             round(iv["sum"]["bits_per_second"] / 1e6, 3))
            for iv in report.get("intervals", []) if "sum" in iv]


def _first_test(path: Path) -> dict[str, Any] | None:
    """The first test report in an iperf3 server's JSON log (one object per test, and one
    more, an error, when the server itself is stopped), or None."""
    try:
        text = path.read_text()
    except OSError:
        return None
    dec, i = json.JSONDecoder(), 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            return None
        if isinstance(obj, dict) and obj.get("intervals"):
            return obj
    return None


def _kill_pid(pid: int) -> None:
    """Last resort: SIGKILL a process group / pid we started ourselves."""
    import signal

    for fn in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            fn()
            return
        except OSError:
            continue
