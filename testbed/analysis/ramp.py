"""A congestion ramp read from run folders: windows of constant stream count, each run's
steps as a track, throughput and level per window (issue 48: the paper's ramp figure).

A ramp is a run whose timeline is cross traffic only (``cross_start`` / ``cross_stop``: the
paper's 1, 10, ..., 50 iperf3 streams, each held a while, a pause between) on the clock of
``timeline_origin: first_step``: 0 is the end of rank 0's first step, and ``steps.csv``'s
``t`` and ``events.csv`` share that clock (the paced simulation starts its cross flows from
the first step's end too: ``testbed.simulation.paced_ramp`` reads its ramps with this
module). A ramp on the launch clock is not one here: its windows would sit at an unknown
offset from its steps.

A run's steps are read as a **track**: one entry a step after the first, its end on that
clock, its samples (all ranks') and its level. A step occupies the time from the previous
step's end to its own, its samples spread evenly over it, so a window's throughput is the
samples that fell into it over its length (a step longer than a window -- allreduce under
50 streams -- counts in every window it spans, in proportion), and a level holds from the
step's start to its end. On these:

* :func:`windows`: the timeline cut where the number of streams changes (``idle`` before
  the first, ``pause`` between, the tail ``after`` the last stop);
* :func:`throughput`: samples/s of a track in a window, and the share of the window the
  track covers (a run that stopped early covers its later windows in part or not at all);
* :func:`held` / :func:`dominant_level`: how long each level held in a window, and the one
  held longest with its share.

:func:`ramp_table` is the report's table (``ramp.csv``, the ``ramp`` figure): per experiment,
rate, method and window, the throughput's mean and 95 % t-interval over the seeds that
cover at least :data:`MIN_COVER` of the window, and for an adaptive method the level held
longest over those seeds' time in it, with its share. Read from the loaded folders
(``loading``), never from a run's files directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from netsenseml import methods
from testbed.analysis import loading, tables
from testbed.common.stats import ci95

#: A run counts in a window where its track covers at least this share of it.
MIN_COVER = 0.5
#: The step records' level labels in display order (least reduction first).
LEVEL_ORDER = methods.level_order()
#: The timeline events a ramp consists of.
RAMP_EVENTS = frozenset({"cross_start", "cross_stop"})


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
    other = {ev.get("kind") for ev in timeline} - RAMP_EVENTS
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


def is_ramp(config: dict[str, Any]) -> bool:
    """Whether a run's config.json (its ``scenario``) has a timeline of cross traffic only,
    on the clock of the first step (module docstring)."""
    sc = config.get("scenario") if isinstance(config.get("scenario"), dict) else {}
    tl = sc.get("timeline") or []
    return (bool(tl) and all(isinstance(e, dict) for e in tl)
            and {e.get("kind") for e in tl} <= RAMP_EVENTS
            and sc.get("timeline_origin") == "first_step")


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


def track_of(steps: pd.DataFrame) -> Track:
    """Rank 0's training steps of one run's ``steps.csv`` (as the run reader loaded it:
    ``RunData.steps``) on the timeline's clock: ``t`` is a step's end, ``samples`` all
    ranks' samples of the step; a step without a level (a fixed method's older record) has
    level "" and ratio 1."""
    s = tables.training_step_rows(steps)
    if s.empty or "rank" not in s.columns:
        return Track()
    s = s[s["rank"] == 0].sort_values("t", kind="mergesort")
    if s.empty:
        return Track()
    levels = s["level"] if "level" in s.columns else pd.Series("", index=s.index)
    ratios = pd.to_numeric(s["ratio"], errors="coerce") if "ratio" in s.columns \
        else pd.Series(math.nan, index=s.index)
    origin = float(s["t"].iloc[0])
    return Track([Step(float(t) - origin, float(n), "" if pd.isna(lv) else str(lv),
                       1.0 if pd.isna(r) else float(r))
                  for t, n, lv, r in zip(s["t"].iloc[1:], s["samples"].iloc[1:],
                                         levels.iloc[1:], ratios.iloc[1:], strict=True)])


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


def level_name(s: Step) -> str:
    """The fixed method a step's level sends (``topk:RATIO`` for top-k: ``methods.at_level``);
    the label itself where it is no ladder level."""
    try:
        return str(methods.at_level(s.level, s.ratio))
    except KeyError:
        return s.level


def level_rank(s: Step) -> tuple[int, float]:
    """A step's level's place in a display (``methods.level_order``; a larger top-k ratio,
    less reduction, first)."""
    order = LEVEL_ORDER.index(s.level) if s.level in LEVEL_ORDER else len(LEVEL_ORDER)
    return order, -s.ratio


def held(track: Track, start: float, end: float) -> dict[str, float]:
    """{level (:func:`level_name`): seconds it held} between ``start`` and ``end``."""
    out: dict[str, float] = {}
    lo, hi = max(start, 0.0), min(end, track.end_s)
    for a, b, s in track.spans():
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            key = level_name(s)
            out[key] = out.get(key, 0.0) + overlap
    return out


def dominant(times: dict[str, float]) -> tuple[str, float] | None:
    """The level held longest in ``times`` ({level: seconds}) and its share of them."""
    if not times:
        return None
    key = max(times, key=lambda k: times[k])
    return key, times[key] / sum(times.values())


def dominant_level(track: Track, start: float, end: float) -> tuple[str, float] | None:
    """The level ``track`` held longest between ``start`` and ``end`` (``topk:RATIO`` for
    top-k) and the share of the covered span it held; None where the track covers none."""
    return dominant(held(track, start, end))


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


# ----------------------------------------------------------------------------- the table
COLUMNS = ["experiment", "rate_mbit", "method", "window", "label", "streams", "start_s",
           "end_s", "seeds", "seeds_total", "throughput_mean", "throughput_ci95", "level",
           "level_share"]


def ramp_runs(folders: loading.Folders, runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs (``tables.ok_runs``: one per seed) that are ramps (:func:`is_ramp`)."""
    r = tables.ok_runs(runs)
    if r.empty:
        return r
    return r[[is_ramp(folders[run].config) for run in r["run"]]]


def run_windows(folder: loading.RunData) -> list[dict[str, Any]]:
    """One ramp run's windows as rows: the window, the throughput over the part the run
    covers and the share of the window it covers (``counted`` where it is at least
    :data:`MIN_COVER`), the seconds each level held (``held``), each level's
    :func:`level_rank` (``ranks``). The last window (``after`` the ramp) ends at the run's
    last step."""
    track = track_of(folder.steps)
    ranks = {level_name(s): level_rank(s) for s in track.steps}
    out = []
    for i, w in enumerate(windows((folder.config.get("scenario") or {}).get("timeline") or [])):
        a, b = w.start_s, track.end_s if w.end_s is None else w.end_s  # the whole window
        if b <= a:
            continue
        thr, cover = throughput(track, a, b)
        out.append({"window": i, "label": w.label, "streams": w.streams, "start_s": a,
                    "end_s": b, "throughput": thr, "cover": cover,
                    "counted": thr is not None and cover >= MIN_COVER,
                    "held": held(track, a, b), "ranks": ranks})
    return out


def per_run(folders: loading.Folders, runs: pd.DataFrame) -> pd.DataFrame:
    """The windows (:func:`run_windows`) of each run in ``runs`` (ramp runs: :func:`ramp_runs`)
    with its experiment, rate, method, seed and run."""
    rows = []
    for r in runs.itertuples(index=False):
        who = {"experiment": r.experiment, "rate_mbit": r.rate_mbit, "method": r.method,
               "seed": r.seed, "run": r.run}
        rows += [{**who, **w} for w in run_windows(folders[r.run])]
    return pd.DataFrame(rows)


def _cell(g: pd.DataFrame, seeds_total: int, adaptive: bool) -> dict[str, Any]:
    """One (experiment, rate, method, window) of the table from its runs' rows."""
    counted = g[g["counted"]]
    mean, half, n = ci95(counted["throughput"])
    times: dict[str, float] = {}
    for h in counted["held"]:
        for k, v in h.items():
            times[k] = times.get(k, 0.0) + v
    top = dominant(times) if adaptive else None
    first = g.iloc[0]
    return {"label": first["label"], "streams": int(first["streams"]),
            "start_s": float(first["start_s"]), "end_s": float(counted["end_s"].max()),
            "seeds": n, "seeds_total": seeds_total, "throughput_mean": mean,
            "throughput_ci95": half, "level": top[0] if top else None,
            "level_share": top[1] if top else math.nan}


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`per_run`'s rows as the table (:func:`ramp_table`)."""
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    key = ["experiment", "rate_mbit", "method"]
    for (exp, rate, method), g in rows.groupby(key, dropna=False, sort=True):
        total = g["seed"].nunique()
        adaptive = tables.is_adaptive(str(method))
        for (win, _, _), w in g.groupby(["window", "label", "start_s"], sort=True):
            if w["counted"].any():
                out.append({"experiment": exp, "rate_mbit": rate, "method": method,
                            "window": win, **_cell(w, total, adaptive)})
    return pd.DataFrame(out, columns=COLUMNS)


def ramp_table(folders: loading.Folders, runs: pd.DataFrame) -> pd.DataFrame:
    """Per experiment, rate, method and window of a ramp (module docstring): the throughput
    (samples/s on the runs' clock) mean and 95 % t-interval half-width over the seeds
    counted in it (``seeds``, of ``seeds_total``), and for an adaptive method the level held
    longest over their time in it with its share. A window no run covers by half is left
    out; ``end_s`` of the last window: the latest counted run's last step."""
    return summarise(per_run(folders, ramp_runs(folders, runs)))
