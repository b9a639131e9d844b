"""Bandwidth traces: a trace file becomes a list of ``(seconds, Mbit/s)`` rate changes.

Two formats: a CSV of ``time,rate`` (seconds, Mbit/s), and Mahimahi's packet-delivery
traces, where each line is a millisecond timestamp at which one MTU-sized packet (1500
bytes) may leave; counting timestamps per bin gives a rate. The scenario schema parses a
trace when it validates (so a bad file fails before anything is built); the timeline turns
it into ``set_rate`` actions.

Bounds (a trace is an untrusted file): at most ``bounded.MAX_TRACE_BYTES`` bytes, finite
non-negative numbers, at most MAX_POINTS rate points after Mahimahi binning and after
looping to ``duration_s`` (a 1 ms bin over a week-long timestamp would otherwise allocate
billions of bins).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from testbed.common import bounded

MTU_BYTES = 1500
#: Most rate points a trace may give (each becomes one tc call at run time).
MAX_POINTS = 100_000


class TraceError(ValueError):
    """A trace file that cannot be parsed; message names file and line."""


def parse_trace(path: Path, fmt: str, *, bin_ms: int = 1000) -> list[tuple[float, float]]:
    """Parse a trace into ``[(t_seconds, mbit), ...]`` sorted by time, starting at 0."""
    try:
        text = bounded.read_text(path, bounded.MAX_TRACE_BYTES, path.name)
    except bounded.BoundError as exc:
        raise TraceError(str(exc)) from None
    if fmt == "csv":
        return _parse_csv(path, text)
    if fmt == "mahimahi":
        return _parse_mahimahi(path, text, bin_ms)
    raise TraceError(f"{path.name}: unknown trace format {fmt!r}; accepted: csv, mahimahi")


def _parse_csv(path: Path, text: str) -> list[tuple[float, float]]:
    rows: list[tuple[float, float]] = []
    with io.StringIO(text, newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            cells = [c.strip() for c in row]
            if not cells or not any(cells) or cells[0].startswith("#"):
                continue
            if len(cells) < 2:
                raise TraceError(f"{path.name} line {lineno}: expected 'time,rate'")
            try:
                t, rate = float(cells[0]), float(cells[1])
            except ValueError:
                if not rows and lineno == 1:
                    continue  # header
                raise TraceError(
                    f"{path.name} line {lineno}: not numbers: {','.join(cells[:2])!r}"
                ) from None
            if not (math.isfinite(t) and math.isfinite(rate)):
                raise TraceError(f"{path.name} line {lineno}: time and rate must be finite")
            if t < 0 or rate < 0:
                raise TraceError(f"{path.name} line {lineno}: negative time or rate")
            if len(rows) >= MAX_POINTS:
                raise TraceError(f"{path.name}: more than {MAX_POINTS} rows")
            if rows and t < rows[-1][0]:
                raise TraceError(f"{path.name} line {lineno}: time goes backwards")
            rows.append((t, rate))
    if not rows:
        raise TraceError(f"{path.name}: no 'time,rate' rows")
    return rows


def _parse_mahimahi(path: Path, text: str, bin_ms: int) -> list[tuple[float, float]]:
    stamps: list[int] = []
    with io.StringIO(text) as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                ms = int(line)
            except ValueError:
                raise TraceError(
                    f"{path.name} line {lineno}: expected an integer millisecond timestamp"
                ) from None
            if ms < 0 or (stamps and ms < stamps[-1]):
                raise TraceError(f"{path.name} line {lineno}: timestamps must not decrease")
            if ms // bin_ms >= MAX_POINTS:
                raise TraceError(f"{path.name} line {lineno}: timestamp {ms} ms gives more "
                                 f"than {MAX_POINTS} bins of {bin_ms} ms")
            stamps.append(ms)
    if not stamps:
        raise TraceError(f"{path.name}: empty Mahimahi trace")
    n_bins = stamps[-1] // bin_ms + 1
    counts = [0] * n_bins
    for ms in stamps:
        counts[ms // bin_ms] += 1
    per_bin_to_mbit = MTU_BYTES * 8 / (bin_ms / 1000.0) / 1e6
    return [(i * bin_ms / 1000.0, c * per_bin_to_mbit) for i, c in enumerate(counts)]


def trace_rate_changes(
    rows: list[tuple[float, float]],
    *,
    scale: float = 1.0,
    min_mbit: float = 0.1,
    duration_s: float | None = None,
    period_s: float | None = None,
    end_s: float | None = None,
) -> list[tuple[float, float]]:
    """Rate changes to apply: scaled, floored, repeated rates dropped, looped to duration.

    The loop period is the trace's last time plus one step (the last row holds for one
    interval), or ``period_s`` if given. Changes at or after ``end_s`` (the run's end,
    relative to the trace's start) are dropped: they could never be applied. At most
    MAX_POINTS changes (TraceError beyond).
    """
    if not rows:
        return []
    if period_s is None:
        last = rows[-1][0]
        step = rows[-1][0] - rows[-2][0] if len(rows) > 1 else 1.0
        period_s = last + max(step, 1e-3)
    limit = duration_s if duration_s is not None else period_s - 1e-9
    out: list[tuple[float, float]] = []
    offset = 0.0
    visited = 0
    while True:
        for t, rate in rows:
            when = offset + t
            visited += 1
            if visited > 10 * MAX_POINTS:
                raise TraceError(f"trace replay loops more than {10 * MAX_POINTS} points "
                                 "(shorten duration_s)")
            if when > limit or (end_s is not None and when >= end_s):
                return out
            if len(out) >= MAX_POINTS:
                raise TraceError(f"trace replay gives more than {MAX_POINTS} rate changes "
                                 "(shorten duration_s)")
            value = max(rate * scale, min_mbit)
            if not out or abs(out[-1][1] - value) > 1e-9:
                out.append((round(when, 6), value))
        offset += period_s
        if duration_s is None:
            return out
