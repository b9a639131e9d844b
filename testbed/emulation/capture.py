"""Optional packet capture at the bottleneck (headers only) and its analysis with scapy.

Off by default (scenario ``capture: true`` turns it on): its cost on throughput is measured
by ``benchmarks/capture_overhead.py``, and a capture that slows what it observes is kept out
of ordinary runs.

Capture: the first ``SNAPLEN`` bytes of every frame on the bottleneck device go to
``capture.pcap`` (the classic libpcap format, which Wireshark and scapy read). The switch
end of a link is in the orchestrator's namespace (LinuxBridge), so the capture sees both
directions of the link without entering a host. With GSO on the veth pairs a frame can be
a 64 kB super-packet: lengths are what the device carried, the header is its first
segment's. Two ways to write it, the same file either way (``open_capture``):

* ``tcpdump`` (the Debian package, ``make setup`` installs it; ``tcpdump -i DEV -s 96 -w -
  -U --immediate-mode``, its output a file we open, so the file is ours whoever tcpdump
  runs as): libpcap's memory-mapped ring in C. The default: both keep up with one TCP flow
  at 100 Mbit/s and 1 Gbit/s (no frame dropped, the flow's goodput unchanged), and tcpdump
  does it for about half the CPU of the Python loop below, the budget a 2-core host shares
  with the run (``benchmarks/capture_overhead.py`` compares the two, interleaved).
  Its PID is the caller's to register (``pid``), it is stopped with SIGINT (tcpdump
  flushes and says what it captured and what the kernel dropped) and killed if it does not
  exit.
* ``socket``: the fallback where tcpdump is missing or does not start (it drops privileges
  to its own user, which a user namespace may not map). A thread reads an ``AF_PACKET``
  socket bound to the device (``recv_into`` of a 96-byte buffer with ``MSG_TRUNC``, which
  returns the frame's real length) and appends pcap records. scapy's own sniffer parses
  every packet in Python as it arrives, too slow at 100 Mbit/s on two shared cores.

Either reports ``frames`` (written) and ``dropped`` (frames the kernel could not hand it:
the socket's ``PACKET_STATISTICS``, tcpdump's "dropped by kernel") into summary.json.

Analysis (after the run, scapy's ``PcapReader``): bytes per flow class per time bin, where
the class is ``cross:<id>`` for a TCP flow on an iperf3 port of a cross-traffic group,
``training`` for any other TCP flow between two worker addresses, ``other`` otherwise; and
retransmissions per class (a data segment whose sequence range was already seen in that
flow and direction).
"""

from __future__ import annotations

import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from testbed.common import files

SNAPLEN = 96
ETH_P_ALL = 0x0003
MSG_TRUNC = getattr(socket, "MSG_TRUNC", 0x20)
SOL_PACKET = 263
RCVBUF_BYTES = 2 << 20
PACKET_STATISTICS = 6
BIN_S = 0.5
COLUMNS = ["t", "flow_class", "bytes", "packets", "mbit", "retransmits"]
#: The ways to capture, best first (``open_capture`` takes the first that starts).
TOOLS = ("tcpdump", "socket")
START_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0
SETTLE_S = 0.2  # tcpdump's file unchanged this long: it has written what came
SETTLE_MAX_S = 2.0
DRAIN_S = 1.0  # at most this long reading what the socket holds at stop()


class CaptureError(RuntimeError):
    """A capture that could not start (the reason is the message)."""


class SocketCapture:
    """Headers of every frame on ``dev`` (this namespace) into ``path`` until ``stop()``,
    by a thread reading an AF_PACKET socket."""

    tool = "socket"
    pid: int | None = None

    def __init__(self, dev: str, path: Path, snaplen: int = SNAPLEN) -> None:
        self.dev = dev
        self.path = Path(path)
        self.snaplen = snaplen
        self.frames = 0
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        for opt in (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF):
            try:  # as much room as tcpdump's ring (2 MiB); FORCE passes rmem_max as root
                self._sock.setsockopt(socket.SOL_SOCKET, opt, RCVBUF_BYTES)
                break
            except OSError:
                continue
        self._sock.bind((dev, 0))
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        buf = bytearray(self.snaplen)
        view = memoryview(buf)
        tmp = self.path.with_name(self.path.name + ".part")
        with open(tmp, "wb") as out:
            out.write(pcap_header(self.snaplen))
            pack = struct.Struct("<IIII").pack
            drain_until = None
            while True:
                if drain_until is None and self._stop.is_set():
                    # what the socket holds was sent before stop(): written, not lost
                    self._sock.setblocking(False)
                    drain_until = time.monotonic() + DRAIN_S
                try:
                    n = self._sock.recv_into(buf, self.snaplen, MSG_TRUNC)
                except (TimeoutError, BlockingIOError):
                    if drain_until is not None:
                        break
                    continue
                except OSError:
                    break
                if drain_until is not None and time.monotonic() > drain_until:
                    break
                now = time.time()
                sec = int(now)
                kept = min(n, self.snaplen)
                out.write(pack(sec, int((now - sec) * 1e6), kept, n))
                out.write(view[:kept])
                self.frames += 1
        tmp.replace(self.path)

    def _dropped(self) -> int | None:
        """Frames the kernel dropped for want of room in the socket (read once: it resets)."""
        try:
            _, drops = struct.unpack("II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            return None
        return drops

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        dropped = self._dropped()
        self._sock.close()
        return {"file": self.path.name, "dev": self.dev, "tool": self.tool,
                "frames": self.frames, "dropped": dropped, "snaplen": self.snaplen}


def pcap_header(snaplen: int) -> bytes:
    """The pcap global header: magic, v2.4, tz 0, sigfigs 0, snaplen, linktype 1 (Ethernet)."""
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)


def tcpdump_path() -> str | None:
    """tcpdump on PATH, or in /usr/sbin (off an ordinary user's PATH), or None."""
    return shutil.which("tcpdump") or next(
        (p for p in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump") if Path(p).is_file()), None)


class TcpdumpCapture:
    """Headers of every frame on ``dev`` (this namespace) into ``path`` until ``stop()``,
    written by a tcpdump process (``pid``; its own session)."""

    tool = "tcpdump"

    def __init__(self, dev: str, path: Path, snaplen: int = SNAPLEN) -> None:
        exe = tcpdump_path()
        if exe is None:
            raise CaptureError("tcpdump not found (apt-get install tcpdump)")
        self.dev = dev
        self.path = Path(path)
        self.snaplen = snaplen
        # --immediate-mode: without it libpcap fills TPACKET_V3 blocks that the kernel hands
        # over when full or after 1 s, and the block still open at SIGINT is never written
        # (a test here lost every frame of its last 0.3 s).
        self.argv = [exe, "-i", dev, "-s", str(snaplen), "-w", "-", "-U", "-p", "-n",
                     "--immediate-mode"]
        self.proc: subprocess.Popen | None = None
        self._part = self.path.with_name(self.path.name + ".part")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start tcpdump and return once it is capturing (it says "listening on"); raises
        CaptureError, with tcpdump's own words, when it exits or stays silent instead."""
        with open(self._part, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.PIPE,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stderr is not None
        said = b""
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"listening on" not in said:
            left = deadline - time.monotonic()
            ready = select.select([self.proc.stderr], [], [], max(left, 0))[0] if left > 0 else []
            chunk = self.proc.stderr.read1(4096) if ready else b""  # type: ignore[attr-defined]
            if not chunk:
                self._end(signal.SIGKILL)
                self._part.unlink(missing_ok=True)
                why = said.decode(errors="replace").strip().splitlines() or ["no output"]
                raise CaptureError(f"tcpdump did not start: {why[-1]}")
            said += chunk

    def _end(self, sig: int) -> str:
        """Signal tcpdump, wait for it (SIGKILL after STOP_TIMEOUT_S); its last words."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return (err or b"").decode(errors="replace")

    def _settle(self) -> None:
        """Wait until the file has not grown for SETTLE_S (at most SETTLE_MAX_S): tcpdump
        leaves at SIGINT without reading what its ring still holds, so it gets the time
        to write the frames that came before stop() (a test here lost them all: 0 frames
        when SIGINT came right after the last one)."""
        start = time.monotonic()
        last, since = -1, start
        while time.monotonic() - start < SETTLE_MAX_S:
            size = self._part.stat().st_size
            now = time.monotonic()
            if size != last:
                last, since = size, now
            elif now - since >= SETTLE_S:
                return
            time.sleep(0.05)

    def stop(self) -> dict[str, Any]:
        if self.proc is not None and self.proc.poll() is None:
            self._settle()
        said = self._end(signal.SIGINT)
        self._part.replace(self.path)
        counts = {what: int(n) for n, what in re.findall(
            r"^(\d+) packets? (captured|dropped by kernel)", said, flags=re.M)}
        out = {"file": self.path.name, "dev": self.dev, "tool": self.tool,
               "frames": counts.get("captured"), "dropped": counts.get("dropped by kernel"),
               "snaplen": self.snaplen}
        if self.proc is not None and self.proc.returncode not in (0, -signal.SIGINT):
            out["exit"] = self.proc.returncode
        return out


Capture = TcpdumpCapture | SocketCapture


def open_capture(dev: str, path: Path, snaplen: int = SNAPLEN,
                 tools: tuple[str, ...] = TOOLS) -> tuple[Capture, list[str]]:
    """The first of ``tools`` that starts capturing ``dev`` into ``path``, started, and why
    each one before it did not (raises CaptureError when none starts)."""
    why = []
    for tool in tools:
        try:
            cap: Capture = (TcpdumpCapture if tool == "tcpdump" else SocketCapture)(
                dev, path, snaplen)
            cap.start()
        except (CaptureError, OSError) as exc:
            why.append(f"{tool}: {exc}")
            continue
        return cap, why
    raise CaptureError("; ".join(why) or "no capture tool named")


def classify(ports: dict[int, str], workers: set[str], src: str, dst: str, sport: int,
             dport: int) -> str:
    """The flow class of one TCP segment (module doc)."""
    for p in (sport, dport):
        if p in ports:
            return ports[p]
    if src in workers and dst in workers:
        return "training"
    return "other"


def analyse(pcap: Path, origin_wall: float, ports: dict[int, str], workers: set[str],
            bin_s: float = BIN_S) -> list[dict[str, Any]]:
    """Rows of capture.csv: per time bin and flow class, bytes, packets, Mbit/s, retransmits.

    ``ports``: TCP port -> class (``cross:<id>``); ``workers``: the workers' IPv4 addresses.
    """
    from scapy.layers.inet import IP, TCP
    from scapy.utils import PcapReader

    acc: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    seen: dict[tuple, int] = {}  # (src, sport, dst, dport) -> highest sequence end sent
    with PcapReader(str(pcap)) as reader:
        for pkt in reader:
            if IP not in pkt or TCP not in pkt:
                continue
            ip, tcp = pkt[IP], pkt[TCP]
            cls = classify(ports, workers, ip.src, ip.dst, int(tcp.sport), int(tcp.dport))
            wirelen = int(getattr(pkt, "wirelen", 0) or len(pkt))
            b = int((float(pkt.time) - origin_wall) // bin_s)
            cell = acc[(b, cls)]
            cell[0] += wirelen
            cell[1] += 1
            payload = int(ip.len) - 4 * int(ip.ihl) - 4 * int(tcp.dataofs)
            if payload > 0:
                key = (ip.src, tcp.sport, ip.dst, tcp.dport)
                end = int(tcp.seq) + payload
                top = seen.get(key)
                # a segment wholly below what this direction already sent is a retransmission
                if top is not None and (top - end) % 2**32 < 2**31:
                    cell[2] += 1
                else:
                    seen[key] = end
    rows = []
    for (b, cls), (nbytes, npk, rtx) in sorted(acc.items()):
        rows.append({"t": round(b * bin_s, 3), "flow_class": cls, "bytes": nbytes,
                     "packets": npk, "mbit": round(nbytes * 8 / bin_s / 1e6, 3),
                     "retransmits": rtx})
    return rows


def write_analysis(pcap: Path, out_csv: Path, origin_wall: float, ports: dict[int, str],
                   workers: set[str]) -> dict[str, Any]:
    """capture.csv from capture.pcap; returns per-class totals for summary.json."""
    rows = analyse(pcap, origin_wall, ports, workers)
    files.write_csv(out_csv, COLUMNS, rows)
    totals: dict[str, dict[str, int]] = {}
    for r in rows:
        t = totals.setdefault(r["flow_class"], {"bytes": 0, "packets": 0, "retransmits": 0})
        for k in t:
            t[k] += r[k]
    return {"file": out_csv.name, "classes": totals}
