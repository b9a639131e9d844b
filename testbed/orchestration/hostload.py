"""The host's load during a run: host.csv and ``summary.json``'s ``host_load``.

Why: a run measured on a busy host reads slower, and nothing in its folder used to say so.
Twice a second this reads ``/proc/stat`` (all cores' busy time) and the CPU time of the
processes the run started (workers, iperf3, the orchestrator itself), so a reader sees how
much of the machine *other* work took: ``other_pct`` = busy less the run's own processes,
in percent of all cores. The kernel's packet work (softirq) runs on whichever core and
process it interrupts, so part of the run's own traffic can land in ``other_pct``; a busy
process beside the run shows as tens of percent where a quiet host reads a few.
``other_niced_pct`` is the part of it that ran at a lower priority (``/proc/stat``'s nice
time: processes with nice > 0), which a run at normal priority preempts: only the rest
makes a run say it shared the host (:func:`verdict`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netsenseml.dilation import NONE, Dilation
from testbed.common import files

COLUMNS = ["t", "busy_pct", "run_pct", "other_pct", "other_niced_pct", "load1"]
PERIOD_S = 0.5
#: The other work's mean share of the cores (percent) from which a run is said to have
#: shared the host (:func:`verdict`). A quiet host read 1-11 % over the paper grid's
#: ResNet-18 star (the run's own softirq work lands here too: the most at 10 Gbit/s); the
#: same 36 runs beside a test suite read 46-94 % where the suite ran.
BUSY_OTHER_PCT = 25.0
_TICK = os.sysconf("SC_CLK_TCK")


def stat_times() -> tuple[float, float, float]:
    """(busy, total, niced) seconds of all cores since boot (``/proc/stat``'s first line;
    niced: user time of processes with nice > 0, its second field)."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return (total - idle) / _TICK, total / _TICK, fields[1] / _TICK


def cpu_times() -> tuple[float, float]:
    """(busy, total) seconds of all cores since boot (:func:`stat_times`)."""
    return stat_times()[:2]


def process_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its waited-for children; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime


class HostLoad:
    """Samples the host's load in a thread until :meth:`stop` (module docstring)."""

    def __init__(self, path: Path, pids: Callable[[], list[int]], origin_wall: float,
                 dilation: Dilation | float = NONE, period_s: float = PERIOD_S) -> None:
        self.path, self.pids, self.origin_wall = path, pids, origin_wall
        self.dilation, self.period_s = Dilation.of(dilation), period_s
        self.rows: list[dict[str, Any]] = []
        self._seen: dict[int, float] = {}  # last CPU seconds of each of the run's processes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="netsense-hostload",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run_cpu(self) -> float:
        """CPU seconds the run's processes used since the previous call (a process that
        ended keeps its last reading, so its time is not lost or counted twice)."""
        used = 0.0
        for pid in {os.getpid(), *self.pids()}:
            now = process_cpu(pid)
            before = self._seen.get(pid, 0.0)
            if now > 0:
                used += max(now - before, 0.0)
                self._seen[pid] = now
        return used

    def _loop(self) -> None:
        busy0, total0, nice0 = stat_times()
        self._run_cpu()
        while not self._stop.wait(self.period_s):
            busy, total, nice = stat_times()
            run = self._run_cpu()
            span = total - total0
            if span <= 0:
                continue
            busy_pct = 100 * (busy - busy0) / span
            run_pct = min(100 * run / span, busy_pct)
            niced_pct = min(100 * (nice - nice0) / span, busy_pct - run_pct)
            try:
                load1 = float(Path("/proc/loadavg").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                load1 = None
            self.rows.append({"t": round(self.dilation.virtual_s(time.time() - self.origin_wall), 4),
                              "busy_pct": round(busy_pct, 1), "run_pct": round(run_pct, 1),
                              "other_pct": round(busy_pct - run_pct, 1),
                              "other_niced_pct": round(max(niced_pct, 0.0), 1), "load1": load1})
            busy0, total0, nice0 = busy, total, nice

    def stop(self) -> dict[str, Any]:
        """Stops sampling, writes host.csv; the summary for summary.json."""
        self._stop.set()
        self._thread.join(2.0)
        files.write_csv(self.path, COLUMNS, self.rows)
        return summarize(self.rows)


def verdict(load: dict[str, Any] | None) -> str | None:
    """A warning for a run whose host other work at normal priority kept busy (mean
    ``other_pct`` less ``other_niced_pct`` at least :data:`BUSY_OTHER_PCT`), or None.
    Niced work does not count: ResNet-18's star seed 0 beside a test suite at nice 19
    (``chrt --idle``), 74-93 % of the cores, read 0.970-1.005x its quiet seeds, the seeds'
    own spread (results/README.md section 6). Not a ``degraded`` mark: the pacer judges the run's
    compute (it is late or not), but where the network sets the step the ring's copying
    is real work on shared cores, and no pacer sees it slow: the paper grid's ResNet-18
    allreduce at 1 Gbit/s (435 Mbit/s real) read 339.3 samples/s beside ~79 % other load,
    375.6 on a quiet host (-9.7 %), with no step late; most of the 36 points moved
    within 2 % (results/README.md, section 6)."""
    load = load or {}
    other = load.get("other_mean_pct")
    if other is None:
        return None
    other -= load.get("other_niced_mean_pct") or 0.0
    if other < BUSY_OTHER_PCT:
        return None
    return (f"other work at normal priority kept {other:.0f} % of the host's cores busy "
            f"during the run (mean; "
            f"{BUSY_OTHER_PCT:g} % or more counts as shared): where the network sets the "
            f"step, its timings can read low with no step late (up to ~10 % measured); "
            f"repeat it on a quiet host to compare")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean busy and other load (percent of all cores), the other load's 90th percentile."""
    if not rows:
        return {"samples": 0}
    other = sorted(r["other_pct"] for r in rows)
    return {"samples": len(rows),
            "busy_mean_pct": round(sum(r["busy_pct"] for r in rows) / len(rows), 1),
            "other_mean_pct": round(sum(other) / len(other), 1),
            "other_niced_mean_pct": round(sum(r.get("other_niced_pct") or 0.0 for r in rows)
                                          / len(rows), 1),
            "other_p90_pct": other[min(len(other) - 1, int(0.9 * len(other)))],
            "cores": os.cpu_count()}
