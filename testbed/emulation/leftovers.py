"""Registry of what each Emulation created, and removal of what a crashed run left behind.

Why a registry: a run can be killed with SIGKILL halfway; `netsense clean` must then remove
its interfaces and processes, but only those of this testbed and never another tool's (no
`mn -c`, no pkill by name).  Each Emulation writes one JSON state file per run (atomically)
naming its interface prefix and every PID it started, including Mininet's host shells, with
each process's start time from /proc/<pid>/stat so that a reused PID is never killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

PREFIX_RE = re.compile(r"^nst[0-9a-z]{4}")


def default_state_dir() -> Path:
    """$NETSENSE_STATE_DIR, else /run/netsense (root), else /tmp/netsense-state."""
    env = os.environ.get("NETSENSE_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0 and Path("/run").is_dir():
        return Path("/run/netsense")
    return Path("/tmp/netsense-state")


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


def is_same_process(entry: dict) -> bool:
    """Is the registered process still alive, and the same one (not a reused PID)?"""
    start = proc_starttime(int(entry["pid"]))
    return start is not None and start == entry.get("starttime")


def process_entry(pid: int, role: str) -> dict:
    return {"pid": pid, "starttime": proc_starttime(pid), "role": role,
            "cmdline": proc_cmdline(pid)[:6]}


class Registry:
    """The state file of one run: prefix, owner process, started processes."""

    def __init__(self, prefix: str, state_dir: Path | None = None) -> None:
        self.prefix = prefix
        self.dir = Path(state_dir) if state_dir else default_state_dir()
        self.path = self.dir / f"{prefix}.json"
        self.processes: list[dict] = []
        self.owner = process_entry(os.getpid(), "owner")

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"prefix": self.prefix, "owner": self.owner,
                                   "created": time.time(), "processes": self.processes},
                                  indent=1))
        os.replace(tmp, self.path)

    def add(self, pid: int, role: str) -> None:
        self.processes.append(process_entry(pid, role))
        self.save()

    def remove_file(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def list_interfaces() -> list[str]:
    """Names of all interfaces in the root namespace (`ip -br link`, '@peer' stripped)."""
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True,
                         check=False).stdout
    return [line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()]


def interfaces_with_prefix(prefix: str) -> list[str]:
    return [n for n in list_interfaces() if n.startswith(prefix)]


def delete_interfaces(names: list[str]) -> list[str]:
    """Delete the named interfaces; returns those that could not be deleted."""
    failed = []
    for name in names:
        res = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True,
                             check=False)
        if res.returncode != 0 and name in list_interfaces():
            failed.append(name)
    return failed


def remove_prefixed(prefix: str, wait_s: float = 3.0) -> tuple[list[str], list[str]]:
    """Delete every interface starting with prefix; returns (removed, still_there).

    Interfaces whose namespace is being destroyed vanish asynchronously, so this polls
    for up to wait_s until none is listed.
    """
    removed: list[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        names = interfaces_with_prefix(prefix)
        if not names:
            return removed, []
        failed = delete_interfaces(names)
        removed += [n for n in names if n not in failed]
        if time.monotonic() > deadline:
            return removed, failed
        if failed:
            time.sleep(0.05)


def kill_entries(entries: list[dict], grace_s: float = 1.0) -> list[int]:
    """SIGTERM+SIGHUP the process groups (or processes) of live matching entries, then SIGKILL.

    Returns the PIDs that were alive and matched (and were signalled).
    """
    live = [e for e in entries if is_same_process(e)]
    for e in live:  # SIGHUP too: interactive bash (Mininet's host shells) ignores SIGTERM
        _signal(int(e["pid"]), signal.SIGTERM)
        _signal(int(e["pid"]), signal.SIGHUP)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_same_process(e) for e in live):
        time.sleep(0.02)
    for e in live:
        if is_same_process(e):
            _signal(int(e["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(is_same_process(e) for e in live):
        time.sleep(0.02)
    return [int(e["pid"]) for e in live]


def _signal(pid: int, sig: int) -> None:
    """Signal pid's process group if pid leads one, else pid alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def find(state_dir: Path | None = None, prefix: str | None = None) -> dict:
    """What is left: interfaces matching ^nst[0-9a-z]{4} (or `prefix`) and live registered PIDs.

    Returns {"interfaces": [...], "pids": [...], "registries": [...]}.
    """
    d = Path(state_dir) if state_dir else default_state_dir()
    intfs = [n for n in list_interfaces()
             if (n.startswith(prefix) if prefix else PREFIX_RE.match(n))]
    pids, regs = [], []
    for path in sorted(d.glob("nst*.json")) if d.is_dir() else []:
        data = _load(path)
        if not data or (prefix and data.get("prefix") != prefix):
            continue
        regs.append(str(path))
        pids += [int(e["pid"]) for e in data.get("processes", []) if is_same_process(e)]
    return {"interfaces": intfs, "pids": pids, "registries": regs}


def clean(state_dir: Path | None = None, force: bool = False) -> dict:
    """Remove leftovers of runs named by a registry; only their prefixes and PIDs.

    A registry whose owner process is still alive belongs to a run in progress and is
    skipped unless force=True.  Returns a report: {"interfaces_removed", "pids_killed",
    "registries_removed", "skipped_active", "failed"}.
    """
    d = Path(state_dir) if state_dir else default_state_dir()
    report: dict = {"interfaces_removed": [], "pids_killed": [], "registries_removed": [],
                    "skipped_active": [], "failed": []}
    for path in sorted(d.glob("nst*.json")) if d.is_dir() else []:
        data = _load(path)
        if not data or not PREFIX_RE.match(str(data.get("prefix", ""))):
            continue
        prefix = data["prefix"]
        owner = data.get("owner")
        if owner and not force and is_same_process(owner):
            report["skipped_active"].append(prefix)
            continue
        report["pids_killed"] += kill_entries(data.get("processes", []))
        removed, failed = remove_prefixed(prefix)
        report["interfaces_removed"] += removed
        report["failed"] += failed
        if not failed:
            path.unlink(missing_ok=True)
            report["registries_removed"].append(str(path))
    return report
