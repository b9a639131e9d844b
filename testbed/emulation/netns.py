"""Looking into an emulated host's network namespace from outside, through /proc/<pid>/net.

Why not a command inside the namespace: /proc/<pid>/net/tcp* already shows the sockets of
that process's namespace, so the check costs a file read, not a process spawn (the
orchestrator polls it while iperf3 servers start).
"""

from __future__ import annotations

import time

TCP_LISTEN = "0A"  # socket state column of /proc/net/tcp


def listening(pid: int, port: int) -> bool:
    """Is a TCP socket listening on ``port`` in the network namespace of ``pid``?"""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(want) and parts[3] == TCP_LISTEN:
                        return True
        except OSError:
            continue
    return False


def wait_listening(pid: int, port: int, timeout_s: float, poll_s: float = 0.01) -> bool:
    """Poll ``listening`` until it holds or ``timeout_s`` passes; False at once when the
    process is gone (its /proc entry vanished)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listening(pid, port):
            return True
        try:
            open(f"/proc/{pid}/net/tcp").close()
        except OSError:
            return False
        time.sleep(poll_s)
    return False
