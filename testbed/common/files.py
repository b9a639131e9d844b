"""Files every part of the testbed writes or reads: atomic writers and tolerant readers.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace``), so a reader (a sweep resuming, a plot) never sees half a file, and a
process killed halfway leaves the previous state of each file, not a torn one. Readers
return ``None`` / skip a torn line instead of raising: result folders may be damaged.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

#: errno values that mean "this filesystem takes no more data" rather than a bug.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class NoSpace(OSError):
    """A write refused by a full disk, an exhausted quota or a read-only filesystem."""

    def __init__(self, folder: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.folder = Path(folder)
        self.free = free_bytes(self.folder)

    def __str__(self) -> str:
        what = {errno.EROFS: "read-only filesystem", errno.EDQUOT: "disk quota exceeded"}.get(
            self.errno or 0, "no space left")
        free = "unknown" if self.free is None else human_bytes(self.free)
        return f"{what} on {self.folder} ({free} free)"


class NotEnoughSpace(NoSpace):
    """Less free space than a run (or the next run of a sweep) is expected to need."""

    def __init__(self, folder: Path, need: int) -> None:
        super().__init__(folder, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        self.need = need

    def __str__(self) -> str:
        free = "unknown" if self.free is None else human_bytes(self.free)
        return (f"not enough space on {self.folder}: {free} free, a run needs about "
                f"{human_bytes(self.need)}")


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still put on the filesystem holding ``folder``
    (its nearest existing parent); None when that cannot be asked."""
    p = Path(os.path.abspath(folder))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _umask() -> int:
    """The process umask: from /proc (setting it to read it would race other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _as_open_would(fd: int) -> None:
    """Give a mkstemp file the mode ``open()`` would have given it (module doc)."""
    os.fchmod(fd, 0o666 & ~_umask())


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write via a temp file in the same directory and os.replace (atomic on POSIX).

    ``mode``: the file's mode (default: as ``open()`` would, module doc). Raises
    :class:`NoSpace` when the filesystem is full or read-only (nothing is left behind: the
    temporary file is removed)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if mode is None:
                _as_open_would(fh.fileno())
            else:
                os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if is_no_space(exc) and not isinstance(exc, NoSpace):
            raise NoSpace(path.parent, exc) from exc  # type: ignore[arg-type]
        raise


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (matplotlib,
    pandas); renamed over ``path`` when the block succeeds, removed when it fails."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.",
                                    suffix=path.suffix)
        _as_open_would(fd)
        os.close(fd)
    except OSError as exc:
        if is_no_space(exc):
            raise NoSpace(path.parent, exc) from exc
        raise
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_no_space(exc) and not isinstance(exc, NoSpace):
            raise NoSpace(path.parent, exc) from exc  # type: ignore[arg-type]
        raise


class LinkRefused(OSError):
    """A path inside a results tree that is a symbolic link: never written through, never
    read when it leads outside the tree; ``str()`` is one line."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "symbolic link refused"


def no_links_below(root: Path, path: Path, what: str = "") -> None:
    """Raise :class:`LinkRefused` when ``path`` or a folder between ``root`` and it is a
    symbolic link (``root`` itself may be one: the user named it)."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    try:
        rel = path.relative_to(root)
    except ValueError:
        return  # not below root: the caller's own choice of place
    cur = root
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            label = f"{what} " if what else ""
            raise LinkRefused(f"{label}{cur} is a symbolic link; not followed (remove it or "
                              "give a real folder)")


def inside(root: Path, path: Path) -> bool:
    """Does ``path``, links resolved, lie inside ``root`` (links resolved)?"""
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tuples -> lists, Paths -> str."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(json_safe(data), indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable, torn or no object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return data if isinstance(data, dict) else None


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def json_objects(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The lines that are whole JSON objects, parsed; blank, torn or other lines skipped."""
    out: list[dict[str, Any]] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a worker's JSONL; a torn last line (worker killed mid-write) is skipped."""
    try:
        with open(path) as fh:
            return json_objects(fh)
    except OSError:
        return []


def read_jsonl_tail(path: Path, nbytes: int = 8192) -> list[dict[str, Any]]:
    """The whole records in the last ``nbytes`` of a JSONL being written, newest first (the
    partly written last line, and the cut first one, are skipped): a progress line reads a
    growing file without reading all of it."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - nbytes))
            tail = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return json_objects(reversed(tail))


def unique_dir(path: Path) -> Path:
    """A new folder at ``path`` (or ``path-2``, ``-3`` ...), created exclusively: two runs
    starting in the same second (same method and seed) can never pick the same one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        cand = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            n += 1
