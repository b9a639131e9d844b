"""Ending the daemons a test harness started: the harnesses' one shutdown.

The sshd namespaces (`sshnet`) and the Ray cluster (`raycluster`) both start long-lived
processes that fork children of their own (ssh sessions, Ray's raylets and workers). A
harness must end exactly what it started: SIGTERM first so the daemons close their
children, a bounded wait, SIGKILL for what ignores it, and then SIGKILL for whatever the
harness can prove is still its own (the caller names those PIDs: a namespace's processes,
a session's members).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable


def terminate(procs: Iterable[subprocess.Popen], timeout_s: float) -> None:
    """SIGTERM every process still running, wait up to `timeout_s` each, then SIGKILL it."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL each PID; one already gone is not an error."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
