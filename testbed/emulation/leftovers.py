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
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from testbed.common import files, names
from testbed.common.processes import (  # noqa: F401 - leftovers.proc_* as before
    CMDLINE_KEPT,
    is_same_process,
    proc_cmdline,
    proc_starttime,
)
from testbed.emulation import rootless


def default_state_dir() -> Path:
    """Where run registries live: $NETSENSE_STATE_DIR, else per user.

    Root: /run/netsense.  Anyone else (rootless runs): $XDG_RUNTIME_DIR/netsense (the
    user's own tmpfs, gone at logout like the runs it records), else /tmp/netsense-<uid>,
    one per user so that users never share (or fight over) a registry folder.
    """
    env = os.environ.get("NETSENSE_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/netsense")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return Path(xdg) / "netsense"
    return Path(tempfile.gettempdir()) / f"netsense-{os.getuid()}"


def ensure_own_dir(path: Path) -> None:
    """Create path (mode 0700 when new) and refuse one that another user owns or a symlink.

    Why: /tmp/netsense-<uid> could be created first by someone else to feed us a registry
    (whose PIDs `netsense clean` would kill) or to read ours.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(f"state dir {path} is not a folder of uid {os.geteuid()}; "
                              "remove it or set NETSENSE_STATE_DIR")
    if st.st_mode & 0o022:
        raise PermissionError(f"state dir {path} is writable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); chmod go-w it or set "
                              "NETSENSE_STATE_DIR")


def process_entry(pid: int, role: str, argv: list[str] | None = None) -> dict:
    entry = {"pid": pid, "starttime": proc_starttime(pid), "role": role,
             "cmdline": proc_cmdline(pid)[:CMDLINE_KEPT]}
    if argv:
        entry["argv"] = [str(a) for a in argv[:CMDLINE_KEPT]]
    return entry


def check_own_file(path: Path) -> str | None:
    """Why a state file must not be trusted (another user's, writable by others, a link or
    not a regular file), or None. `netsense clean` kills what such a file names."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file"
    if st.st_uid != os.geteuid():
        return f"{path}: owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return f"{path}: writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_own_dir(path: Path) -> str | None:
    """Why the state folder must not be trusted, or None (see ``ensure_own_dir``)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"state dir {path} is not a folder (a link?)"
    if st.st_uid != os.geteuid():
        return f"state dir {path} is owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return f"state dir {path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def trusted_records(d: Path, pattern: str, refused: list[str] | None = None) -> list[Path]:
    """The state files matching ``pattern`` in ``d`` that may be acted on; the others'
    reasons go to ``refused``. None at all when the folder itself is not ours."""
    refused = refused if refused is not None else []
    if not d.is_dir():
        return []
    why = check_own_dir(d)
    if why:
        refused.append(why)
        return []
    out = []
    for path in sorted(d.glob(pattern)):
        why = check_own_file(path)
        if why:
            refused.append(why)
        else:
            out.append(path)
    return out


class Registry:
    """The state file of one run: prefix, owner process, started processes."""

    def __init__(self, prefix: str, state_dir: Path | None = None) -> None:
        self.prefix = prefix
        self.dir = Path(state_dir) if state_dir else default_state_dir()
        self.path = self.dir / f"{prefix}.json"
        self.processes: list[dict] = []
        self.interfaces: list[str] = []
        self.abandoned: str | None = None
        self.owner = process_entry(os.getpid(), "owner")
        # A rootless run's interfaces die with its namespaces: clean only kills processes.
        self.rootless = rootless.in_namespace()
        self.created = time.time()

    def save(self) -> None:
        ensure_own_dir(self.dir)
        data = {"prefix": self.prefix, "owner": self.owner, "rootless": self.rootless,
                "created": self.created, "processes": self.processes,
                "interfaces": self.interfaces}
        if self.abandoned:
            data["abandoned"] = self.abandoned
        files.atomic_write_text(self.path, json.dumps(data, indent=1), mode=0o600)

    def add(self, pid: int, role: str, argv: list[str] | None = None) -> None:
        self.processes.append(process_entry(pid, role, argv))
        self.save()

    def note_interfaces(self, names: list[str]) -> None:
        """Record interfaces this run creates (before creating them, where it can)."""
        new = [n for n in names if n.startswith(self.prefix) and n not in self.interfaces]
        if new:
            self.interfaces += new
            self.save()

    def abandon(self, why: str) -> None:
        """The owner gave up on its teardown: `netsense clean` may finish it although the
        owner (a sweep going on) is still alive."""
        self.abandoned = why
        self.save()

    def remove_file(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def list_interfaces() -> list[str]:
    """Names of all interfaces in the root namespace (`ip -br link`, '@peer' stripped)."""
    try:
        out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True,
                             check=False, timeout=10).stdout
    except subprocess.TimeoutExpired:
        return []
    return [line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()]


def interfaces_with_prefix(prefix: str) -> list[str]:
    return [n for n in list_interfaces() if n.startswith(prefix)]


def delete_interfaces(names: list[str]) -> list[str]:
    """Delete the named interfaces; returns those that could not be deleted."""
    failed = []
    for name in names:
        try:
            res = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True,
                                 check=False, timeout=5)
        except subprocess.TimeoutExpired:
            failed.append(name)
            continue
        if res.returncode != 0 and name in list_interfaces():
            failed.append(name)
    return failed


def remove_prefixed(prefix: str, wait_s: float = 3.0, only: list[str] | None = None
                    ) -> tuple[list[str], list[str]]:
    """Delete every interface starting with prefix (and named in ``only``, when given);
    returns (removed, still_there).

    Interfaces whose namespace is being destroyed vanish asynchronously, so this polls
    for up to wait_s until none is listed.
    """
    removed: list[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        found = [n for n in interfaces_with_prefix(prefix) if only is None or n in only]
        if not found:
            return removed, []
        failed = delete_interfaces(found)
        removed += [n for n in found if n not in failed]
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


def find(state_dir: Path | None = None, prefix: str | None = None) -> dict:
    """What is left: interfaces matching ^nst[0-9a-z]{4} (or `prefix`) and live registered PIDs.

    Returns {"interfaces": [...], "pids": [...], "registries": [...], "refused": [...]}
    (registries not trusted: another user's, writable by others, or in such a folder).
    """
    d = Path(state_dir) if state_dir else default_state_dir()
    intfs = [n for n in list_interfaces()
             if (n.startswith(prefix) if prefix else names.has_prefix_form(n))]
    pids, regs, refused = [], [], []
    for path in trusted_records(d, "nst*.json", refused):
        data = files.read_json(path)
        if not data or (prefix and data.get("prefix") != prefix):
            continue
        regs.append(str(path))
        pids += [int(e["pid"]) for e in data.get("processes", [])
                 if isinstance(e, dict) and is_same_process(e)]
    return {"interfaces": intfs, "pids": pids, "registries": regs, "refused": refused}


def clean(state_dir: Path | None = None, force: bool = False) -> dict:
    """Remove leftovers of runs named by a registry; only their prefixes and PIDs.

    Only registries this user owns, in a folder this user owns, neither writable by others,
    are acted on (the rest are listed as ``refused``); a process is killed only when its
    PID, start time and command line match its record; an interface is deleted only when
    it carries the run's prefix *and* the registry recorded its creation.

    A registry whose owner process is still alive belongs to a run in progress and is
    skipped unless force=True, or unless the owner gave up on it (``abandoned``: its
    teardown ran past its deadline).  A rootless run's registry (in the user's state dir)
    names only processes: killing them removes its namespaces and every interface in them.
    Returns a report: {"interfaces_removed", "pids_killed", "registries_removed",
    "skipped_active", "failed", "refused"}.
    """
    d = Path(state_dir) if state_dir else default_state_dir()
    report: dict = {"interfaces_removed": [], "pids_killed": [], "registries_removed": [],
                    "skipped_active": [], "failed": [], "refused": []}
    for path in trusted_records(d, "nst*.json", report["refused"]):
        data = files.read_json(path)
        if not data or not names.is_prefix(str(data.get("prefix", ""))):
            continue
        prefix = data["prefix"]
        owner = data.get("owner")
        if (owner and not force and not data.get("abandoned")
                and isinstance(owner, dict) and is_same_process(owner)):
            report["skipped_active"].append(prefix)
            continue
        entries = [e for e in data.get("processes", []) if isinstance(e, dict)]
        report["pids_killed"] += kill_entries(entries)
        failed = [f"pid {e['pid']}" for e in entries if is_same_process(e)]
        if not data.get("rootless"):
            # A rootless run's interfaces were in its own namespaces, gone with their last
            # process; the same prefix here would be someone else's.
            recorded = [str(n) for n in data.get("interfaces") or []
                        if isinstance(n, str) and n.startswith(prefix)]
            removed, failed_intfs = remove_prefixed(prefix, only=recorded)
            report["interfaces_removed"] += removed
            failed += failed_intfs
        report["failed"] += failed
        if not failed:
            path.unlink(missing_ok=True)
            report["registries_removed"].append(str(path))
    return report


# ----------------------------------------------------------------- records of live runs
#
# Why a second kind of registry: a run killed with SIGKILL *before* its network exists (or
# after it was torn down) leaves no nst*.json, yet its run folder says "running" for ever.
# Each orchestrator therefore registers its run folder here while the run is live
# (``run-<pid>-<starttime>.json``); `netsense clean` finds those whose owner is dead and
# repairs the folder's record (status failed, reason "orchestrator died ...").

RUN_GLOB = "run-*.json"


def register_run(run_dir: Path, state_dir: Path | None = None) -> Path:
    """Record that this process is writing ``run_dir``; returns the record's path."""
    d = Path(state_dir) if state_dir else default_state_dir()
    ensure_own_dir(d)
    owner = process_entry(os.getpid(), "orchestrator")
    path = d / f"run-{owner['pid']}-{owner['starttime']}.json"
    files.atomic_write_text(path, json.dumps({"run_dir": str(Path(run_dir).resolve()),
                                              "owner": owner}), mode=0o600)
    return path


def unregister_run(path: Path | None) -> None:
    if path is not None:
        Path(path).unlink(missing_ok=True)


def dead_run_records(state_dir: Path | None = None, refused: list[str] | None = None
                     ) -> list[tuple[Path, dict]]:
    """(record path, record) of registered runs whose orchestrator is gone (only records
    this user owns, see ``trusted_records``; the others' reasons go to ``refused``)."""
    d = Path(state_dir) if state_dir else default_state_dir()
    out = []
    for path in trusted_records(d, RUN_GLOB, refused):
        data = files.read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("owner"), dict):
            continue
        if not is_same_process(data["owner"]):
            out.append((path, data))
    return out
