"""A congestion ramp in the paced simulation, and against its emulated runs (issue 52).

A ramp is a timeline of cross traffic (``cross_start`` / ``cross_stop``: the paper's 1, 10,
..., 50 iperf3 streams, each held a while, a pause between), on the clock of
``timeline_origin: first_step``: 0 is the end of rank 0's first step, in the emulated run
(its ``steps.csv`` ``t`` and ``events.csv`` share that clock) as in the simulation (the
paced controller starts the cross flows from the first step's end).

Both sides are read as a **track**: one entry a step after the first, its end on that
clock, its samples (all ranks') and its level. A step occupies the time from the previous
step's end to its own, its samples spread evenly over it, so a window's throughput is the
samples that fell into it over its length (a step longer than a window -- allreduce under
50 streams -- counts in every window it spans, in proportion), and a level holds from the
step's start to its end. On these:

* :func:`windows`: the timeline cut where the number of streams changes (``idle`` before
  the first, ``pause`` between, the tail after the last stop);
* :func:`throughput`: samples/s of a track in a window, and the share of the window the
  track covers (a run that stopped early covers its later windows in part or not at all);
* :func:`level_share`: the share of a span on which two tracks' levels are the same (the
  level, and a top-k ratio within ``paced_validation.RATIO_TOL``) -- the issue's target:
  NetSenseML's simulated level equals the emulated one on >= 90 % of the ramp's time.

Compared by time, not by step number: where the two sides' steps differ in length, step
``n`` of one falls at another point of the ramp than step ``n`` of the other.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.simulation import paced
from testbed.simulation import paced_validation as pv

#: A window counts where both tracks cover at least this share of it.
MIN_COVER = 0.5
#: The issue's target: the simulated level equals the emulated one on this share of time.
LEVEL_TARGET = 0.9


@dataclass(frozen=True)
class Window:
    """A span of the timeline with one number of streams (``end_s`` None: to the end)."""

    start_s: float
    end_s: float | None
    streams: int
    label: str

    def bounds(self, end_s: float) -> tuple[float, float]:
        return self.start_s, end_s if self.end_s is None else min(self.end_s, end_s)


def windows(timeline: list[dict[str, Any]]) -> list[Window]:
    """The timeline's cross traffic as spans of a constant stream count: from 0 to the first
    event, between events, and after the last (to the end); ``idle`` before the first
    stream, ``pause`` between streams, ``after`` past the last; streams of concurrent
    starts add up. ValueError for an event other than ``cross_start`` / ``cross_stop``."""
    other = {ev.get("kind") for ev in timeline} - {"cross_start", "cross_stop"}
    if other:
        raise ValueError(f"timeline events {sorted(other)}: a ramp is cross_start/cross_stop")
    active: dict[str, int] = {}
    cuts: list[tuple[float, int]] = []  # (time, streams from then on)
    for ev in sorted(timeline, key=lambda e: float(e["at_s"])):
        if ev["kind"] == "cross_start":
            active[ev["id"]] = int(ev.get("streams") or 1)
        else:
            active.pop(ev.get("id"), None)
        t, n = float(ev["at_s"]), sum(active.values())
        cuts = [c for c in cuts if c[0] != t] + [(t, n)]
    out: list[Window] = []
    start, streams = 0.0, 0
    for t, n in cuts:
        if n == streams:
            continue
        if t > start:
            out.append(Window(start, t, streams, ""))
        start, streams = t, n
    out.append(Window(start, None, streams, ""))
    seen = False
    labelled = []
    for w in out:
        if w.streams:
            seen = True
            label = f"{w.streams} streams"
        else:
            label = "after" if w.end_s is None and seen else ("pause" if seen else "idle")
        labelled.append(Window(w.start_s, w.end_s, w.streams, label))
    return labelled


# ----------------------------------------------------------------------------- tracks
@dataclass(frozen=True)
class Step:
    end_s: float  # on the timeline's clock (0: the first step's end)
    samples: float
    level: str
    ratio: float


@dataclass
class Track:
    """Steps after the first, in order; the first one's end is the clock's 0."""

    steps: list[Step] = field(default_factory=list)

    @property
    def end_s(self) -> float:
        return self.steps[-1].end_s if self.steps else 0.0

    def spans(self) -> list[tuple[float, float, Step]]:
        """Each step's (start, end, step): from the previous step's end to its own."""
        out, prev = [], 0.0
        for s in self.steps:
            out.append((prev, s.end_s, s))
            prev = s.end_s
        return out


def emulated_track(run: Path) -> Track:
    """Rank 0's steps of the run folder on the timeline's clock (``steps.csv``: ``t`` is a
    step's end; ``samples`` all ranks' samples of the step)."""
    rows = pv.rank0_steps(run)
    if not rows:
        return Track()
    origin = float(rows[0]["t"])
    return Track([Step(float(r["t"]) - origin, float(r["samples"]), r.get("level") or "",
                       _ratio(r.get("ratio"))) for r in rows[1:]])


def _ratio(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else 1.0
    except ValueError:
        return 1.0


def simulated_track(job: paced.PacedJob, res: paced.PacedResult) -> Track:
    """The simulation's steps on the same clock (``StepRecord.t`` is a step's start)."""
    if not res.steps:
        return Track()
    first = res.steps[0]
    origin = first.t + first.step_s
    samples = float(job.batch_size * job.workers)
    return Track([Step(s.t + s.step_s - origin, samples, s.level, s.ratio)
                  for s in res.steps[1:]])


def throughput(track: Track, start: float, end: float) -> tuple[float | None, float]:
    """Samples/s of ``track`` between ``start`` and ``end`` (over the part the track
    covers), and the share of the span it covers; (None, share) where it covers none."""
    lo, hi = max(start, 0.0), min(end, track.end_s)
    cover = max(0.0, hi - lo) / (end - start) if end > start else 0.0
    if hi <= lo:
        return None, cover
    samples = 0.0
    for a, b, s in track.spans():
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0 and b > a:
            samples += s.samples * overlap / (b - a)
    return samples / (hi - lo), cover


def same_level(a: Step, b: Step) -> bool:
    """The same level, and for top-k the same ratio within ``paced_validation.RATIO_TOL``."""
    return pv.same_level(a.level, a.ratio, b.level, b.ratio)


def level_share(a: Track, b: Track, start: float = 0.0, end: float | None = None
                ) -> float | None:
    """The share of ``start``..``end`` (default: as far as both tracks go) on which the two
    tracks' levels are the same; None where they share no time there."""
    hi = min(a.end_s, b.end_s, end if end is not None else float("inf"))
    lo = max(start, 0.0)
    if hi <= lo:
        return None
    sa, sb = a.spans(), b.spans()
    i = j = 0
    same = 0.0
    while i < len(sa) and j < len(sb):
        x0, x1, xs = sa[i]
        y0, y1, ys = sb[j]
        overlap = min(x1, y1, hi) - max(x0, y0, lo)
        if overlap > 0 and same_level(xs, ys):
            same += overlap
        if x1 <= y1:
            i += 1
        else:
            j += 1
    return same / (hi - lo)


def dominant_level(track: Track, start: float, end: float) -> tuple[str, float] | None:
    """The level ``track`` held longest between ``start`` and ``end`` (``topk:RATIO`` for
    top-k) and the share of the covered span it held; None where the track covers none."""
    held: dict[str, float] = {}
    lo, hi = max(start, 0.0), min(end, track.end_s)
    for a, b, s in track.spans():
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            key = level_name(s)
            held[key] = held.get(key, 0.0) + overlap
    if not held:
        return None
    key = max(held, key=lambda k: held[k])
    return key, held[key] / sum(held.values())


def level_name(s: Step) -> str:
    return str(paced.level_method(s.level, s.ratio))


def level_segments(track: Track) -> list[tuple[float, float, str]]:
    """The track's levels as (start, end, level) spans, consecutive equal levels merged."""
    out: list[tuple[float, float, str]] = []
    for a, b, s in track.spans():
        name = level_name(s)
        if out and out[-1][2] == name:
            out[-1] = (out[-1][0], b, name)
        else:
            out.append((a, b, name))
    return out


# ----------------------------------------------------------------------------- a run against it
@dataclass
class WindowRow:
    """One window of one run: both throughputs, the error, the levels' agreement."""

    run: str
    model: str
    method: str
    window: Window
    emulated: float | None
    simulated: float | None
    emu_cover: float
    sim_cover: float
    levels_same: float | None = None
    predicted: float | None = None  # the committed prediction's, where it has this window

    @property
    def counted(self) -> bool:
        return (self.emulated is not None and self.simulated is not None
                and self.emu_cover >= MIN_COVER and self.sim_cover >= MIN_COVER)

    @property
    def error_pct(self) -> float | None:
        if not self.counted or not self.emulated:
            return None
        return 100.0 * (self.simulated / self.emulated - 1.0)  # type: ignore[operator]

    @property
    def prediction_error_pct(self) -> float | None:
        if not self.counted or self.predicted is None or not self.emulated:
            return None
        return 100.0 * (self.predicted / self.emulated - 1.0)


@dataclass
class RunComparison:
    run: str
    model: str
    method: str
    k: float
    rows: list[WindowRow]
    levels_same: float | None  # over the whole span both cover (adaptive methods)
    span_s: float


def is_ramp(run: Path) -> bool:
    """Whether the run folder's scenario has a timeline of cross traffic only."""
    try:
        sc = json.loads((run / "config.json").read_text())["scenario"]
        tl = sc.get("timeline") or []
        return bool(tl) and {e.get("kind") for e in tl} <= {"cross_start", "cross_stop"}
    except (OSError, ValueError, KeyError):
        return False


def compare_run(run: Path, label: str, job: paced.PacedJob, res: paced.PacedResult,
                predicted: dict[tuple[str, str, float], float] | None = None
                ) -> RunComparison:
    """One emulated ramp run against its simulation (``job``, ``res``: from the run's own
    config.json), per window the run reached; ``predicted``: (model, method, window start) -> samples/s of
    a prediction made before the run."""
    cfg = json.loads((run / "config.json").read_text())
    wins = windows(cfg["scenario"].get("timeline") or [])
    emu, sim = emulated_track(run), simulated_track(job, res)
    adaptive = job.method in paced.SIMULATED
    rows = []
    for w in wins:
        a, b = w.bounds(max(emu.end_s, sim.end_s))
        if b <= a:
            continue
        e_thr, e_cov = throughput(emu, a, b)
        if e_thr is None:  # a window the emulated run never reached is not compared
            continue
        s_thr, s_cov = throughput(sim, a, b)
        rows.append(WindowRow(label, job.model, job.method, w, e_thr, s_thr, e_cov, s_cov,
                              level_share(emu, sim, a, b) if adaptive else None,
                              (predicted or {}).get((job.model, job.method, w.start_s))))
    return RunComparison(label, job.model, job.method, job.dilation, rows,
                         level_share(emu, sim) if adaptive else None,
                         min(emu.end_s, sim.end_s))


def collect(root: Path) -> tuple[list[tuple[Path, paced.PacedJob]], list[str]]:
    """The ok ramp runs under ``root`` the paced simulation can run; one line per run left
    out, saying why."""
    out, skipped = [], []
    for d in pv.run_folders(root):
        if not is_ramp(d):
            continue
        try:
            status = json.loads((d / "summary.json").read_text()).get("status")
        except (OSError, ValueError):
            status = None
        if status != "ok":
            skipped.append(f"{d}: status {status!r}")
            continue
        try:
            out.append((d, paced.from_run(d)))
        except (ValueError, KeyError, OSError) as exc:
            skipped.append(f"{d}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return out, skipped


def compare(root: Path, workers: int = 1,
            predicted: dict[tuple[str, str, float], float] | None = None
            ) -> tuple[list[RunComparison], list[str]]:
    """Every ok ramp run under ``root`` against its simulation from its own config.json."""
    runs, skipped = collect(root)
    results = paced.simulate_isolated([job for _, job in runs], workers)
    return ([compare_run(d, str(d.relative_to(root)), job, res, predicted)
             for (d, job), res in zip(runs, results, strict=True)], skipped)


def summary(comps: list[RunComparison]) -> list[str]:
    """Median and worst |throughput error| over the counted windows; the level agreement."""
    rows = [r for c in comps for r in c.rows if r.error_pct is not None]
    out = []
    if rows:
        errs = [abs(r.error_pct) for r in rows]  # type: ignore[arg-type]
        worst = max(rows, key=lambda r: abs(r.error_pct))  # type: ignore[arg-type]
        out.append(f"throughput per window: {len(rows)} windows, |error| median "
                   f"{statistics.median(errs):.1f} %, worst {max(errs):.1f} % "
                   f"({worst.run}, {worst.window.label})")
    pred = [abs(r.prediction_error_pct) for c in comps for r in c.rows  # type: ignore[arg-type]
            if r.prediction_error_pct is not None]
    if pred:
        out.append(f"the committed prediction per window: {len(pred)} windows, |error| median "
                   f"{statistics.median(pred):.1f} %, worst {max(pred):.1f} %")
    shares = [c.levels_same for c in comps if c.levels_same is not None]
    if shares:
        met = sum(s >= LEVEL_TARGET for s in shares)
        out.append(f"levels same: {len(shares)} adaptive runs, median "
                   f"{100 * statistics.median(shares):.1f} %, lowest {100 * min(shares):.1f} %; "
                   f"{met} of {len(shares)} at >= {100 * LEVEL_TARGET:g} % (target)")
    return out
