"""Both ways of writing the bottleneck capture (``testbed.emulation.capture``) on the loopback
device: the same pcap (Ethernet, 96-byte snap length, the frame's real length kept), every
frame sent before ``stop()`` in the file, and the socket thread taken when tcpdump is
missing. Root (a packet socket), no emulation: nothing is built."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from testbed.emulation import capture

# serial: every frame sent must be captured (a busy core beside it must not decide that)
pytestmark = [pytest.mark.root("for a packet socket"), pytest.mark.serial]
MARK = b"netsense-capture-test"


def _send(n: int, size: int = 1000) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(n):
            s.sendto(MARK + b"x" * (size - len(MARK)), ("127.0.0.1", 9))


def _frames(path: Path) -> list[tuple[int, int, bytes]]:
    """(kept, frame length, bytes) of each record of a classic pcap file; checks the header."""
    data = path.read_bytes()
    magic, major, minor, _, _, snaplen, linktype = struct.unpack("<IHHiIII", data[:24])
    assert (magic, major, minor, snaplen, linktype) == (0xA1B2C3D4, 2, 4, capture.SNAPLEN, 1)
    out, i = [], 24
    while i < len(data):
        _, _, kept, length = struct.unpack("<IIII", data[i:i + 16])
        out.append((kept, length, data[i + 16:i + 16 + kept]))
        i += 16 + kept
    return out


@pytest.mark.parametrize("tool", capture.TOOLS)
def test_each_tool_writes_every_frame_sent_before_stop(tmp_path, tool):
    if tool == "tcpdump" and capture.tcpdump_path() is None:
        pytest.skip("no tcpdump (apt-get install tcpdump)")
    cap, why = capture.open_capture("lo", tmp_path / "c.pcap", tools=(tool,))
    assert why == [] and cap.tool == tool and (cap.pid is not None) == (tool == "tcpdump")
    _send(50)
    done = cap.stop()
    assert done["tool"] == tool and done["dropped"] == 0, done
    frames = _frames(tmp_path / "c.pcap")
    # our datagrams (UDP, the mark after the headers); loopback shows a packet socket each
    # frame twice (out and in), libpcap keeps one
    ours = [f for f in frames if f[2][23] == 17 and f[2][42:42 + len(MARK)] == MARK]
    assert len(ours) in (50, 100), (len(ours), len(frames), done)
    assert all(kept == capture.SNAPLEN and length == 1042 for kept, length, _ in ours)
    assert done["frames"] == len(frames)
    assert not list(tmp_path.glob("*.part"))


def test_without_tcpdump_the_socket_thread_captures(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "tcpdump_path", lambda: None)
    cap, why = capture.open_capture("lo", tmp_path / "c.pcap")
    assert cap.tool == "socket" and why == ["tcpdump: tcpdump not found (apt-get install tcpdump)"]
    cap.stop()


def test_a_missing_device_is_one_error_naming_each_tool(tmp_path):
    with pytest.raises(capture.CaptureError) as err:
        capture.open_capture("nstnosuch0", tmp_path / "c.pcap")
    assert "socket:" in str(err.value)
    assert not list(tmp_path.iterdir())
