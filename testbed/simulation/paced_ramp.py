"""A congestion ramp in the paced simulation, and against its emulated runs (issue 52).

A ramp is a timeline of cross traffic (``cross_start`` / ``cross_stop``: the paper's 1, 10,
..., 50 iperf3 streams, each held a while, a pause between), on the clock of
``timeline_origin: first_step``: 0 is the end of rank 0's first step, in the emulated run
(its ``steps.csv`` ``t`` and ``events.csv`` share that clock) as in the simulation (the
paced controller starts the cross flows from the first step's end).

Both sides are read as a **track** (``testbed.analysis.ramp``, which the report's ramp
figure and table read the run folders with too: the windows of constant streams, a track's
steps, its throughput and levels per window): one entry a step after the first, its end on
that clock, its samples (all ranks') and its level. Here:

* :func:`simulated_track`: the simulation's steps as a track on the same clock;
* :func:`level_share`: the share of a span on which two tracks' levels are the same (the
  level, and a top-k ratio within ``paced_validation.RATIO_TOL``) -- the issue's target:
  NetSenseML's simulated level equals the emulated one on >= 90 % of the ramp's time.

Compared by time, not by step number: where the two sides' steps differ in length, step
``n`` of one falls at another point of the ramp than step ``n`` of the other.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from testbed.analysis import loading, ramp
from testbed.analysis.ramp import MIN_COVER, Step, Track, Window, throughput, track_of, windows
from testbed.simulation import paced
from testbed.simulation import paced_validation as pv

#: The issue's target: the simulated level equals the emulated one on this share of time.
LEVEL_TARGET = 0.9


def emulated_track(run: Path) -> Track:
    """Rank 0's steps of the run folder on the timeline's clock, as the run reader loads
    them (``ramp.track_of``)."""
    return track_of(loading.folder_of(run).steps)


def simulated_track(job: paced.PacedJob, res: paced.PacedResult) -> Track:
    """The simulation's steps on the same clock (``StepRecord.t`` is a step's start)."""
    if not res.steps:
        return Track()
    first = res.steps[0]
    origin = first.t + first.step_s
    samples = float(job.batch_size * job.workers)
    return Track([Step(s.t + s.step_s - origin, samples, s.level, s.ratio)
                  for s in res.steps[1:]])


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
    """Whether the run folder's scenario is a ramp (``ramp.is_ramp``: cross traffic only, on
    the clock of the first step)."""
    try:
        return ramp.is_ramp(loading.read_json_file(run / "config.json", required=True))
    except (OSError, loading.Damaged):
        return False


def compare_run(run: Path, label: str, job: paced.PacedJob, res: paced.PacedResult,
                predicted: dict[tuple[str, str, float], float] | None = None
                ) -> RunComparison:
    """One emulated ramp run against its simulation (``job``, ``res``: from the run's own
    config.json), per window the run reached; ``predicted``: (model, method, window start) -> samples/s of
    a prediction made before the run."""
    folder = loading.folder_of(run)
    wins = windows(folder.config["scenario"].get("timeline") or [])
    emu, sim = track_of(folder.steps), simulated_track(job, res)
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
