"""The adaptation timeline of one run: what the network did and how the methods responded.

Panels, each with one y axis and its unit: the rate (configured, and the monitor's estimate
when logged), competing iperf3 streams (when there were any), the bottleneck queue in
packets (when sampled), the adaptive methods' kept ratio and level (NetSenseML's, the
prototype rule's and the adaptive peers' StellaTrain and Accordion, each in its colour; only
the levels they used), and every method's step time. All on one time axis: seconds since the run's first
training step (rank 0), so events of the ``timeline_origin: first_step`` scenarios line up
with their ``at_s`` times in every run.

It shows one experiment, one seed and one rate: the adaptive method's lowest seed, and every
other method run with the same seed at the same rate (so the network panels, which are that
run's, are true of every step-time series under them). Where another of those runs lasted
longer than the adaptive one (a slower method to the same target), the configured rate and
the streams go on dashed as the longest run had them applied, to the end of its steps: the
same schedule, so the later step times have their network beside them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from netsenseml import methods
from testbed.analysis import tables
from testbed.analysis.figures import Figure, Inputs, NoData, network, style
from testbed.analysis.figures import accuracy as accuracy_figure

#: The registry's display order of step-record levels (least to most reduction).
LEVEL_ORDER = methods.level_order()


def select(inp: Inputs) -> pd.DataFrame:
    """Runs of kind timeline; else the first experiment with applied events; else the
    accuracy figure's runs. Narrowed to one seed and rate (module docstring)."""
    r = tables.ok_runs(inp.runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "timeline"]
    if sel.empty:
        dyn = r[[not network.read_events(inp.folder(run)).dropna(subset=["t_applied"]).empty
                 for run in r["run"]]]
        sel = dyn[dyn["experiment"] == dyn["experiment"].iloc[0]] if not dyn.empty else dyn
    if sel.empty:
        sel = accuracy_figure.select(inp)
    if sel.empty:
        return sel
    ns = sel[sel["method"] == style.ADAPTIVE]
    ref = (ns if not ns.empty else sel).sort_values(["seed", "rate_mbit"]).iloc[0]
    same_rate = (sel["rate_mbit"] == ref["rate_mbit"]) | (
        sel["rate_mbit"].isna() & pd.isna(ref["rate_mbit"]))
    out = sel[(sel["seed"] == ref["seed"]) & (sel["experiment"] == ref["experiment"])
              & same_rate]
    # the reference run first: draw() takes its network
    return pd.concat([out[out["run"] == ref["run"]], out[out["run"] != ref["run"]]])


def _rank0(s: pd.DataFrame) -> pd.DataFrame:
    s = tables.training_step_rows(s)
    return s[s["rank"] == s["rank"].min()].sort_values("t")


def _first_step_t(s: pd.DataFrame) -> float:
    s = tables.training_step_rows(s)
    return float(s["t"].min()) if not s.empty else 0.0


@dataclass
class _Reference:
    """The reference run (``sel``'s first): its rank-0 steps and its network as applied,
    every time in seconds since its first training step."""

    run: pd.Series
    steps: pd.DataFrame  # rank 0's training steps, t in seconds since the first
    events: pd.DataFrame
    rate: pd.DataFrame
    streams: pd.DataFrame
    queue: pd.DataFrame
    t0: float
    #: the runs whose kept ratio and levels are drawn (:func:`_adaptive`)
    adaptive: list[_Series] = field(default_factory=list)
    #: the network after the reference run's end, as the longest selected run had it
    after: _After | None = None


@dataclass
class _After:
    """The longest selected run's configured rate, streams and applied events from the
    reference run's end to its own (times on its own clock, as the reference's are)."""

    method: str
    rate: pd.DataFrame
    streams: pd.DataFrame
    events: pd.DataFrame


@dataclass
class _Series:
    """One run's rank-0 training steps, t in seconds since its own first step."""

    method: str
    steps: pd.DataFrame
    t0: float
    color: Any


def _adaptive(inp: Inputs, sel: pd.DataFrame) -> list[_Series]:
    """Every selected run of an adaptive method (the registry's kind: NetSenseML, the
    prototype's rule, the peers), the reference first; the reference alone when none is
    adaptive. Each on its own clock (seconds since its first training step)."""
    rows = [r for _, r in sel.iterrows() if tables.is_adaptive(r["method"])] or [sel.iloc[0]]
    out = []
    for r in rows:
        s_all = inp.steps[inp.steps["run"] == r["run"]]
        steps = _rank0(s_all)
        if not steps.empty:
            out.append(_Series(str(r["method"]), steps, _first_step_t(s_all), inp.color(r["method"])))
    return out


def _reference(inp: Inputs, sel: pd.DataFrame) -> _Reference:
    if sel.empty:
        raise NoData("no finished run")
    ref = sel.iloc[0]
    ref_all = inp.steps[inp.steps["run"] == ref["run"]]
    ref_steps = _rank0(ref_all)
    if ref_steps.empty:
        raise NoData(f"{ref['run']} has no step rows")
    t0 = _first_step_t(ref_all)
    t_end = float(ref_steps["t"].max()) - t0
    folder = inp.folder(ref["run"])
    cfg = folder.config
    events = _applied(folder, t0)
    rate, streams = network.network_series(cfg, events, t_end)
    rate["t"] = rate["t"].clip(lower=0)
    streams["t"] = streams["t"].clip(lower=0)
    return _Reference(ref, ref_steps, events, rate, streams,
                      network.read_bottleneck(folder), t0, _adaptive(inp, sel),
                      _after(inp, sel, t_end))


def _applied(folder: Any, t0: float) -> pd.DataFrame:
    """A run's events, ``t_applied`` in seconds since its first training step."""
    events = network.read_events(folder)
    if not events.empty:
        events = events.assign(t_applied=pd.to_numeric(events["t_applied"], errors="coerce")
                               - t0)
    return events


def _after(inp: Inputs, sel: pd.DataFrame, t_end: float) -> _After | None:
    """The network past the reference run's end ``t_end``: the longest selected run's, from
    ``t_end`` to its last step; None when no run outlasted the reference."""
    ends = []
    for _, r in sel.iloc[1:].iterrows():
        s_all = inp.steps[inp.steps["run"] == r["run"]]
        s = _rank0(s_all)
        if not s.empty:
            t0 = _first_step_t(s_all)
            ends.append((float(s["t"].max()) - t0, t0, r))
    if not ends:
        return None
    end, t0, r = max(ends, key=lambda x: x[0])
    if end <= t_end * 1.02:
        return None
    folder = inp.folder(r["run"])
    events = _applied(folder, t0)
    rate, streams = network.network_series(folder.config, events, end)

    def tail(series: pd.DataFrame, col: str) -> pd.DataFrame:
        before = series[series["t"] <= t_end]
        start = float(before[col].iloc[-1]) if not before.empty else float(series[col].iloc[0])
        return pd.concat([pd.DataFrame({"t": [t_end], col: [start]}),
                          series[series["t"] > t_end]], ignore_index=True)

    late = events[pd.to_numeric(events.get("t_applied"), errors="coerce") > t_end] \
        if not events.empty else events
    return _After(str(r["method"]), tail(rate, "rate_mbit"), tail(streams, "streams"), late)


def _levels(steps: pd.DataFrame) -> pd.Series:
    """A run's level per step; empty when it logged none (or numbers)."""
    lv = steps["level"] if "level" in steps.columns else pd.Series(dtype=object)
    return lv if lv.notna().any() and not pd.api.types.is_numeric_dtype(lv) \
        else pd.Series(dtype=object)


def _has_kept(steps: pd.DataFrame) -> bool:
    return "kept_ratio" in steps.columns and bool(steps["kept_ratio"].notna().any())


def _panels(ref: _Reference) -> dict[str, Any]:
    """{panel: its axis}, top to bottom: only the panels the runs have data for."""
    has_kept = any(_has_kept(x.steps) for x in ref.adaptive)
    has_level = any(not _levels(x.steps).empty for x in ref.adaptive)
    streams = ref.streams["streams"].max() > 0 or (
        ref.after is not None and ref.after.streams["streams"].max() > 0)
    panels = ["network"] + (["streams"] if streams else []) \
        + (["queue"] if not ref.queue.empty else []) + (["kept"] if has_kept else []) \
        + (["level"] if has_level else []) + ["step"]
    heights = {"network": 1.2, "streams": 0.7, "queue": 0.8, "kept": 1.0, "level": 0.8,
               "step": 1.4}
    _, axes = plt.subplots(len(panels), 1, figsize=(8.5, 1.2 + 1.7 * sum(
        heights[p] for p in panels)), sharex=True,
        gridspec_kw={"height_ratios": [heights[p] for p in panels]})
    return dict(zip(panels, np.atleast_1d(axes), strict=True))


def _network_panel(a: Any, ref: _Reference, color: Any) -> None:
    rate, est = ref.rate, network.estimate_mbit(ref.steps)
    a.step(rate["t"], rate["rate_mbit"], where="post", color="k", lw=1.4,
           label="configured rate (training path's lowest)")
    if ref.after is not None:
        a.step(ref.after.rate["t"], ref.after.rate["rate_mbit"], where="post", color="k",
               lw=1.2, ls="--", alpha=0.6, label=f"after its run: {ref.after.method}'s")
    if est is not None:
        a.plot(ref.steps["t"] - ref.t0, est[0], ls="none", marker=".", ms=3, color=color,
               alpha=0.7, label=f"{ref.run['method']}: {est[1]}")
    top = float(np.nanmax(rate["rate_mbit"])) if rate["rate_mbit"].notna().any() else None
    if top:  # an estimate measured over a tiny window must not squash the configured rate;
        # room above it for the legend (3 lines with the longer run's rate, which reaches
        # the right-hand side the legend sits on)
        a.set_ylim(0, top * (2.0 if ref.after is not None else 1.5))
    a.set_ylabel(style.NETWORK_AXIS)
    style.plain(a)
    style.legend(a, loc="upper right")


def _streams_panel(a: Any, ref: _Reference, _color: Any) -> None:
    streams = ref.streams
    a.step(streams["t"], streams["streams"], where="post", color="tab:red")
    top = float(streams["streams"].max())
    if ref.after is not None:
        a.step(ref.after.streams["t"], ref.after.streams["streams"], where="post",
               color="tab:red", ls="--", alpha=0.6)
        top = max(top, float(ref.after.streams["streams"].max()))
    a.set_ylim(0, max(1.0, top) * 1.2)
    a.yaxis.get_major_locator().set_params(integer=True)
    a.set_ylabel(style.STREAMS_AXIS)


def _queue_panel(a: Any, ref: _Reference, _color: Any) -> None:
    queue = ref.queue
    a.plot(queue["t"] - ref.t0, queue["queue"], color="tab:purple", lw=0.8,
           drawstyle="steps-post")
    a.set_ylabel(style.QUEUE_AXIS)
    a.text(0.01, 0.92, f"queue of link {queue['label'].iloc[0]}", fontsize=7,
           transform=a.transAxes, va="top")
    a.set_ylim(bottom=0)
    a.yaxis.get_major_locator().set_params(integer=True)
    style.plain(a)


def _kept_panel(a: Any, ref: _Reference, _color: Any) -> None:
    for x in ref.adaptive:
        if _has_kept(x.steps):
            a.plot(x.steps["t"] - x.t0, x.steps["kept_ratio"], drawstyle="steps-post", lw=1,
                   color=x.color, label=x.method)
    a.set_yscale("log")
    style.log_ticks(a)
    a.set_ylabel(style.KEPT_AXIS)
    if len(ref.adaptive) > 1:
        style.legend(a, loc="lower right", fontsize=7)


def _level_panel(a: Any, ref: _Reference, _color: Any) -> None:
    """Only the levels the runs used, in the ladder's order; a run drawn over another is
    offset a little, so that equal levels stay visible."""
    series = [(x, _levels(x.steps)) for x in ref.adaptive]
    seen = list(dict.fromkeys(v for _, lv in series for v in lv.dropna()))
    cats = [c for c in LEVEL_ORDER if c in seen] + [c for c in seen if c not in LEVEL_ORDER]
    drawn = [(x, lv) for x, lv in series if not lv.empty]
    for n, (x, lv) in enumerate(drawn):
        offset = 0.0 if len(drawn) == 1 else 0.15 * (n - (len(drawn) - 1) / 2) / max(1, len(drawn) - 1)
        a.plot(x.steps["t"] - x.t0, lv.map({c: i for i, c in enumerate(cats)}) + offset,
               drawstyle="steps-post", color=x.color, lw=1, label=x.method)
    a.set_yticks(range(len(cats)), cats, fontsize=7)
    a.set_ylim(-0.5, len(cats) - 0.5)
    a.set_ylabel(style.LEVEL_AXIS)


def _step_panel(a: Any, inp: Inputs, sel: pd.DataFrame) -> None:
    """Every selected method's step time (rank 0), each on its own run's clock."""
    for _, r in sel.iterrows():
        s_all = inp.steps[inp.steps["run"] == r["run"]]
        s = _rank0(s_all)
        if "step_s" not in s.columns or s.empty:
            continue
        m = r["method"]
        a.plot(s["t"] - _first_step_t(s_all), s["step_s"], color=inp.color(m), label=m,
               ls="none", marker=".", ms=2.5 if m == style.ADAPTIVE else 2, alpha=0.8)
    a.set_yscale("log")
    style.log_ticks(a)
    a.set_ylabel(style.STEP_TIME_AXIS.replace("(s,", f"({style.time_unit(sel)},"))
    a.set_xlabel(f"time since the run's first training step ({style.time_unit(sel)})")
    style.plain(a, "x")
    style.legend(a, ncol=3, markerscale=3)


_PANELS = {"network": _network_panel, "streams": _streams_panel, "queue": _queue_panel,
           "kept": _kept_panel, "level": _level_panel}


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    ref = _reference(inp, sel)
    ax = _panels(ref)
    color = inp.color(ref.run["method"])
    for name, a in ax.items():
        if name == "step":
            _step_panel(a, inp, sel)
        else:
            _PANELS[name](a, ref, color)
    events = ref.events
    if ref.after is not None and not ref.after.events.empty:
        events = pd.concat([events, ref.after.events], ignore_index=True)
    applied = events.dropna(subset=["t_applied"]) if not events.empty else events
    for one in ax.values():
        for t in applied.get("t_applied", []):
            one.axvline(float(t), color="k", alpha=0.2, lw=0.8)
        one.grid(True, alpha=0.3)
    ax["network"].set_xlim(left=0)
    fig = ax["network"].figure
    fig.align_ylabels(list(ax.values()))
    run = ref.run
    where = f" at {style.rate_text(run['rate_mbit'])}" if pd.notna(run["rate_mbit"]) else ""
    constant = ref.rate["rate_mbit"].nunique(dropna=True) <= 1
    ax["network"].set_title(
        f"{run['experiment']}{where}, seed {run['seed']}: the network as applied"
        f"{' (rate constant)' if constant else ''} and the methods' response", fontsize=9)
    return fig


FIGURE = Figure(
    name="adaptation_timeline",
    title="Adaptation timeline",
    caption="One run's network as applied (configured rate and the monitor's estimate, "
    "competing iperf3 streams, the bottleneck queue when sampled), the adaptive methods' "
    "kept ratio and the levels they used (NetSenseML's and, where run, the prototype rule's "
    "and the peers'), and the step time of every method run with the same "
    "seed at the same rate; grey lines: applied events.",
    needs="finished runs (kind timeline, else runs with applied events)",
    runs=select,
    draw=draw,
)
