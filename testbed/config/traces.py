"""Bandwidth traces: a trace file becomes a list of ``(seconds, Mbit/s)`` rate changes.

Two formats: a CSV of ``time,rate`` (seconds, Mbit/s), and Mahimahi's packet-delivery
traces, where each line is a millisecond timestamp at which one MTU-sized packet (1500
bytes) may leave; counting timestamps per bin gives a rate. The scenario schema parses a
trace when it validates (so a bad file fails before anything is built); the timeline turns
it into ``set_rate`` actions.
"""

from __future__ import annotations

import csv
from pathlib import Path

MTU_BYTES = 1500


class TraceError(ValueError):
    """A trace file that cannot be parsed; message names file and line."""


def parse_trace(path: Path, fmt: str, *, bin_ms: int = 1000) -> list[tuple[float, float]]:
    """Parse a trace into ``[(t_seconds, mbit), ...]`` sorted by time, starting at 0."""
    if fmt == "csv":
        return _parse_csv(path)
    if fmt == "mahimahi":
        return _parse_mahimahi(path, bin_ms)
    raise TraceError(f"{path.name}: unknown trace format {fmt!r}; accepted: csv, mahimahi")


def _parse_csv(path: Path) -> list[tuple[float, float]]:
    rows: list[tuple[float, float]] = []
    with open(path, newline="") as fh:
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
            if t < 0 or rate < 0:
                raise TraceError(f"{path.name} line {lineno}: negative time or rate")
            if rows and t < rows[-1][0]:
                raise TraceError(f"{path.name} line {lineno}: time goes backwards")
            rows.append((t, rate))
    if not rows:
        raise TraceError(f"{path.name}: no 'time,rate' rows")
    return rows


def _parse_mahimahi(path: Path, bin_ms: int) -> list[tuple[float, float]]:
    stamps: list[int] = []
    with open(path) as fh:
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
) -> list[tuple[float, float]]:
    """Rate changes to apply: scaled, floored, repeated rates dropped, looped to duration.

    The loop period is the trace's last time plus one step (the last row holds for one
    interval), or ``period_s`` if given.
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
    while True:
        for t, rate in rows:
            when = offset + t
            if when > limit:
                return out
            value = max(rate * scale, min_mbit)
            if not out or abs(out[-1][1] - value) > 1e-9:
                out.append((round(when, 6), value))
        offset += period_s
        if duration_s is None:
            return out
