"""A process named in a record: is it still alive, and the same one (not a reused PID)?

Why here, below the emulation: the emulation's registry (``testbed.emulation.leftovers``)
kills only processes it can match this way, and the analysis asks the same question of a
run record that says ``running`` (``testbed.common.provenance.stale_reason``); the
analysis must not import the emulation or the orchestration to ask it.
"""

from __future__ import annotations

from pathlib import Path


def proc_starttime(pid: int) -> int | None:
    """Start time (clock ticks since boot) of pid, or None if it is gone (or a zombie)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens: fields after the last ')' are fixed
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):  # a zombie has exited; only its exit status is left
        return None
    return int(fields[19])


def proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


CMDLINE_KEPT = 6


def is_same_process(entry: dict) -> bool:
    """Is the registered process still alive, and the same one (not a reused PID)?

    Same PID, same start time *and* a command line the record knows: the one seen when it
    was registered, or the command it was started to run (``mnexec -a PID argv`` becomes
    ``argv`` when it execs). A record that names neither is matched by PID and start time.
    """
    try:
        pid = int(entry["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = proc_starttime(pid)
    if start is None or start != entry.get("starttime"):
        return False
    known = [list(c)[:CMDLINE_KEPT] for c in (entry.get("cmdline"), entry.get("argv"))
             if isinstance(c, list) and c]
    return not known or proc_cmdline(pid)[:CMDLINE_KEPT] in known
