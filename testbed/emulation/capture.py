"""Optional packet capture at the bottleneck (headers only) and its analysis with scapy.

Off by default (scenario ``capture: true`` turns it on): its cost on throughput is measured
by ``benchmarks/capture_overhead.py``, and a capture that slows what it observes is kept out
of ordinary runs.

Capture: no tcpdump on these machines, and scapy's own sniffer parses every packet in
Python as it arrives (too slow at 100 Mbit/s on two shared cores). So a thread reads an
``AF_PACKET`` socket bound to the bottleneck device, keeps the first ``SNAPLEN`` bytes of
each frame (``recv_into`` of a 96-byte buffer with ``MSG_TRUNC``, which returns the frame's
real length) and appends pcap records to ``capture.pcap`` (the classic libpcap format, so
Wireshark and scapy read it). The switch end of a link is in the orchestrator's namespace
(LinuxBridge), so the socket sees both directions of the link without entering a host.
With GSO on the veth pairs a frame can be a 64 kB super-packet: lengths are what the device
carried, the header is its first segment's.

Analysis (after the run, scapy's ``PcapReader``): bytes per flow class per time bin, where
the class is ``cross:<id>`` for a TCP flow on an iperf3 port of a cross-traffic group,
``training`` for any other TCP flow between two worker addresses, ``other`` otherwise; and
retransmissions per class (a data segment whose sequence range was already seen in that
flow and direction).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from testbed.common import files

SNAPLEN = 96
ETH_P_ALL = 0x0003
MSG_TRUNC = getattr(socket, "MSG_TRUNC", 0x20)
BIN_S = 0.5
COLUMNS = ["t", "flow_class", "bytes", "packets", "mbit", "retransmits"]


class Capture:
    """Headers of every frame on ``dev`` (this namespace) into ``path`` until ``stop()``."""

    def __init__(self, dev: str, path: Path, snaplen: int = SNAPLEN) -> None:
        self.dev = dev
        self.path = Path(path)
        self.snaplen = snaplen
        self.frames = 0
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
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
            # pcap global header: magic, v2.4, tz 0, sigfigs 0, snaplen, linktype 1 (Ethernet)
            out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, self.snaplen, 1))
            pack = struct.Struct("<IIII").pack
            while not self._stop.is_set():
                try:
                    n = self._sock.recv_into(buf, self.snaplen, MSG_TRUNC)
                except TimeoutError:
                    continue
                except OSError:
                    break
                now = time.time()
                sec = int(now)
                kept = min(n, self.snaplen)
                out.write(pack(sec, int((now - sec) * 1e6), kept, n))
                out.write(view[:kept])
                self.frames += 1
        tmp.replace(self.path)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        return {"file": self.path.name, "dev": self.dev, "frames": self.frames,
                "snaplen": self.snaplen}


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
