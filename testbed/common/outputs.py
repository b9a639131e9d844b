"""Output locations checked before anything is built: one line instead of a traceback.

Why up front: ``netsense run --out X`` builds a network and starts workers before its
first write into X; if X is a file, read-only, or on a pseudo-filesystem (/proc, /sys,
/dev, cgroup ...), the run used to fail deep inside with a 40-70-line traceback. Each
command that writes (run, sweep, plot, report) calls :func:`check_dir` / :func:`check_file`
first; they create nothing. Writability is *tried* (a temporary file in the nearest
existing folder, removed at once) rather than read from permission bits, because root
ignores the bits but not a read-only mount.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

#: Filesystems that hold no user files (writes there are kernel calls, or vanish).
PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs",
    "binfmt_misc", "efivarfs", "autofs", "nsfs", "rpc_pipefs", "selinuxfs",
})


class OutputError(ValueError):
    """An unusable output location; ``str()`` is one line naming the option."""


def _mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of this process's mounts, longest point first."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5 and right:
                    point = fields[4].encode().decode("unicode_escape")
                    out.append((point, right.split()[0]))
    except OSError:
        return []
    return sorted(out, key=lambda m: len(m[0]), reverse=True)


def fs_type(path: Path) -> str | None:
    """Filesystem type of the mount holding ``path`` (resolved), or None if unknown."""
    p = str(Path(path).resolve())
    for point, kind in _mounts():
        if p == point or p.startswith(point.rstrip("/") + "/"):
            return kind
    return None


def _nearest_existing(path: Path) -> Path:
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


#: Longest path accepted for an output folder: PATH_MAX (4096) less room for the run
#: folders and files below it.
MAX_OUT_PATH = 3000
NAME_MAX = 255


def check_dir(path: Path, option: str, shown: Path | None = None) -> None:
    """OutputError unless ``path`` is, or can become, a writable folder for results.

    ``shown``: the path the user gave, when it is not ``path`` (a file's folder)."""
    label = f"{option} {str(shown or path)!r}"
    try:
        _check_dir(Path(path).expanduser(), label)
    except (OSError, ValueError) as exc:  # NUL bytes, ENAMETOOLONG, ELOOP ...
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"{label}: unusable: {getattr(exc, 'strerror', None) or exc}"
                          ) from None


def _check_dir(path: Path, label: str) -> None:
    if "\0" in str(path):
        raise OutputError(f"{label}: contains a NUL byte")
    if len(os.path.abspath(path)) > MAX_OUT_PATH:
        raise OutputError(f"{label}: path longer than {MAX_OUT_PATH} characters")
    if any(len(part.encode()) > NAME_MAX for part in path.parts):
        raise OutputError(f"{label}: a folder name is longer than {NAME_MAX} bytes")
    if path.exists() and not path.is_dir():
        raise OutputError(f"{label}: exists and is not a folder")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise OutputError(f"{label}: {str(base)!r} is a file, not a folder")
    kind = fs_type(base)
    if kind in PSEUDO_FS:
        raise OutputError(f"{label}: on a {kind} pseudo-filesystem; give a folder on a real "
                          "disk")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".netsense-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{label}: cannot write in {str(base)!r} "
                          f"({exc.strerror or exc})") from None


def check_file(path: Path, option: str) -> None:
    """OutputError unless ``path`` can be written as a file (its folder checked as above)."""
    path = Path(path).expanduser()
    try:
        path.is_dir()
    except (OSError, ValueError):
        return check_dir(path, option)  # gives the one-line reason
    if path.is_dir():
        raise OutputError(f"{option} {str(path)!r}: is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise OutputError(f"{option} {str(path)!r}: exists and is not a regular file")
    check_dir(path.parent, option, shown=path)


# ---------------------------------------------------------------- committed results trees
#: Where ``report`` and ``plot`` write by default for a results folder git tracks: a folder
#: the checkout ignores (``results/*`` is ignored but for the committed parts), so a report
#: of the committed evaluation leaves ``git status`` clean.
VIEWS = Path("results") / "views"


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def tracked(folder: Path) -> bool:
    """Whether git tracks a file under ``folder`` (a committed results tree, e.g.
    ``results/runs/``: writing figures into it would leave untracked files in the
    checkout). False outside a git work tree or without git."""
    p = _git(Path(folder), "ls-files", "--", ".")
    return p is not None and p.returncode == 0 and p.stdout.strip() != ""


def view_folder(folder: Path) -> Path:
    """Where ``report``/``plot`` write for a :func:`tracked` ``folder`` unless told: its path
    in the checkout under :data:`VIEWS` (``results/runs/x`` -> ``results/views/runs/x``)
    when git ignores that place, else under the system's temporary folder
    (``netsense-views/<the same path>``)."""
    folder = Path(folder).resolve()
    top = _git(folder, "rev-parse", "--show-toplevel")
    root = Path(top.stdout.strip()) if top is not None and top.returncode == 0 else None
    if root is not None:
        rel = folder.relative_to(root) if folder.is_relative_to(root) else Path(folder.name)
        parts = rel.parts[1:] if rel.parts[:1] == (VIEWS.parts[0],) else rel.parts
        place = root / VIEWS / Path(*parts) if parts else root / VIEWS
        ignored = _git(root, "check-ignore", "-q", str(place.relative_to(root)))
        if ignored is not None and ignored.returncode == 0:
            return place
        return Path(tempfile.gettempdir()) / "netsense-views" / rel
    return Path(tempfile.gettempdir()) / "netsense-views" / folder.name


#: Where a checkout keeps its committed evaluation (``netsense pack -o results/runs/<eval>``).
COMMITTED_RUNS = Path("results") / "runs"


def committed_runs_of(folder: Path) -> Path | None:
    """The committed evaluation (``results/runs/`` of the checkout) beside a :func:`tracked`
    ``folder``, where there is one; None for a folder git does not track (a user's own
    results: nothing beside it is taken for its answer)."""
    if not tracked(folder):
        return None
    top = _git(Path(folder), "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        return None
    runs = Path(top.stdout.strip()) / COMMITTED_RUNS
    return runs if runs.is_dir() else None
