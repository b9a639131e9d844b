"""Files every part of the testbed writes or reads: atomic writers and tolerant readers.

Every file is written to a temporary name in the same folder and renamed into place
(``os.replace``), so a reader (a sweep resuming, a plot) never sees half a file, and a
process killed halfway leaves the previous state of each file, not a torn one. Readers
return ``None`` / skip a torn line instead of raising: result folders may be damaged.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and os.replace (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (matplotlib,
    pandas); renamed over ``path`` when the block succeeds, removed when it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
