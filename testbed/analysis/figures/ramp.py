"""The congestion ramp in the paper's form: throughput and the adaptive methods' level per
window of constant competing streams, against time with the streams shaded.

One page per ramp experiment (the paper grid's ``resnet18-ramp``, ``vgg16-ramp``,
``gpt2-ramp``: one per model; a column per rate where an experiment ran several), from what
the table ``ramp.csv`` holds (``testbed.analysis.ramp``: runs whose timeline is cross traffic
only, on the clock of the first step). Panels, one x axis (seconds since rank 0's first
training step, virtual where dilated), every window of the ramp shaded by its stream count:

* the iperf3 streams the timeline runs, per window;
* throughput per window, one line per method at its mean over the seeds that cover at
  least half of the window, a band and a bar for the 95 % t-interval (two or more seeds),
  a dot per run;
* the level each adaptive method (NetSenseML, the prototype's rule, the peers) held
  longest in the window over those seeds, with the share of their time it held.

A window no run covers by half (a run that reached its target before the ramp's end) has
no mark: the line breaks there.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from testbed.analysis import ramp as ramps
from testbed.analysis.figures import Figure, Inputs, NoData, style


def select(inp: Inputs) -> pd.DataFrame:
    """The finished ramp runs (``ramp.ramp_runs``)."""
    return ramps.ramp_runs(inp.folders, inp.runs)


def _same_rate(col: pd.Series, rate: Any) -> pd.Series:
    return col.isna() if pd.isna(rate) else col == rate


def _shade(axes: list[Any], wins: list[ramps.Window], end: float) -> None:
    top = max((w.streams for w in wins), default=0) or 1
    for w in wins:
        if w.streams:
            for ax in axes:
                ax.axvspan(w.start_s, end if w.end_s is None else w.end_s, color="tab:red",
                           alpha=0.04 + 0.16 * w.streams / top, lw=0, zorder=0)


def _streams_panel(ax: Any, wins: list[ramps.Window], end: float) -> None:
    xs = [w.start_s for w in wins] + [end]
    ys = [w.streams for w in wins] + [wins[-1].streams]
    ax.step(xs, ys, where="post", color="tab:red")
    ax.set_ylim(0, max(1, max(ys)) * 1.2)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(style.STREAMS_AXIS)


def _throughput_panel(ax: Any, inp: Inputs, t: pd.DataFrame, rows: pd.DataFrame) -> None:
    """Each method's mean per window as a line (broken where a window is not covered), its
    interval as a band and a bar at the window's middle (methods a little apart), the runs
    as dots."""
    n_methods = t["method"].nunique()
    for k, (m, g) in enumerate(t.groupby("method", sort=True)):
        color = inp.color(m)
        g = g.sort_values("start_s")
        xs: list[float] = []
        ys: list[float] = []
        for r in g.itertuples(index=False):
            if xs and not math.isclose(xs[-1], r.start_s):
                xs.append(math.nan)  # a window not covered: the line breaks
                ys.append(math.nan)
            xs += [r.start_s, r.end_s]
            ys += [r.throughput_mean, r.throughput_mean]
            if r.throughput_ci95 == r.throughput_ci95:
                ax.fill_between([r.start_s, r.end_s], r.throughput_mean - r.throughput_ci95,
                                r.throughput_mean + r.throughput_ci95, color=color, alpha=0.18,
                                lw=0)
        ax.plot(xs, ys, color=color, lw=1.6 if m == style.ADAPTIVE else 1.2, label=m)
        shift = 0.08 * (k - (n_methods - 1) / 2)  # a share of the window's length

        def middle(f: pd.DataFrame, shift: float = shift) -> pd.Series:
            return f["start_s"] + (0.5 + shift) * (f["end_s"] - f["start_s"])

        half = g["throughput_ci95"].fillna(0.0)
        ax.errorbar(middle(g), g["throughput_mean"], yerr=half if half.any() else None,
                    ls="none", marker="o", ms=3.5, capsize=2.5, color=color, label=m)
        dots = rows[(rows["method"] == m) & rows["counted"]]
        ax.scatter(middle(dots), dots["throughput"], s=9, color=color, alpha=0.45, lw=0,
                   zorder=5)
    ax.set_yscale("log")
    style.log_ticks(ax)
    ax.set_ylabel(style.THROUGHPUT_AXIS)
    style.legend(ax, ncol=3, loc="lower left")


def _level_panel(ax: Any, inp: Inputs, t: pd.DataFrame, rows: pd.DataFrame) -> None:
    """The level each adaptive method held longest per window, its share above it; the
    levels in the ladder's order (``ramp.level_rank``)."""
    lv = t.dropna(subset=["level"])
    ranks: dict[str, tuple[int, float]] = {}
    for r in rows["ranks"]:
        ranks.update(r)
    last = (len(ramps.LEVEL_ORDER), 0.0)
    cats = sorted(set(lv["level"]), key=lambda x: (ranks.get(x, last), x))
    drawn = sorted(set(lv["method"]))
    for n, (m, g) in enumerate(lv.groupby("method", sort=True)):
        off = 0.0 if len(drawn) == 1 else 0.3 * (n / (len(drawn) - 1) - 0.5)
        for r in g.itertuples(index=False):
            y = cats.index(r.level) + off
            ax.plot([r.start_s, r.end_s], [y, y], color=inp.color(m), lw=3,
                    solid_capstyle="butt", label=m)
            ax.text((r.start_s + r.end_s) / 2, y + 0.12, f"{r.level_share:.0%}", fontsize=6,
                    ha="center", va="bottom", color=inp.color(m))
    ax.set_yticks(range(len(cats)), cats, fontsize=7)
    ax.set_ylim(-0.6, len(cats) - 0.3)
    ax.set_ylabel(style.LEVEL_AXIS)
    if len(drawn) > 1:
        style.legend(ax, loc="lower right", fontsize=7)


def _column(axes: list[Any], inp: Inputs, t: pd.DataFrame, rows: pd.DataFrame,
            runs: pd.DataFrame) -> None:
    """One rate's panels (``axes``: streams, throughput, level or None)."""
    wins = ramps.windows((inp.folder(runs["run"].iloc[0]).config.get("scenario") or {})
                         .get("timeline") or [])
    end = float(max(t["end_s"].max(), max((w.end_s or 0.0) for w in wins)))
    if axes[2] is not None and not t["level"].notna().any():  # no adaptive method at this rate
        axes[2].remove()
        axes = axes[:2] + [None]
    drawn = [ax for ax in axes if ax is not None]
    _shade(drawn, wins, end)
    _streams_panel(axes[0], wins, end)
    _throughput_panel(axes[1], inp, t, rows)
    if axes[2] is not None:
        _level_panel(axes[2], inp, t, rows)
    for ax in drawn:
        ax.grid(True, alpha=0.3)
    drawn[-1].set_xlim(0, end)
    drawn[-1].tick_params(labelbottom=True)  # the lowest panel left in this column
    drawn[-1].set_xlabel(f"time since rank 0's first training step ({style.time_unit(runs)})"
                         "; shaded: competing streams")
    style.plain(drawn[-1], "x")
    rate = t["rate_mbit"].iloc[0]
    where = f" at {style.rate_text(rate)}" if pd.notna(rate) else ""
    axes[0].set_title(f"{t['experiment'].iloc[0]}{where}", fontsize=9)


def _page(inp: Inputs, t: pd.DataFrame, rows: pd.DataFrame, runs: pd.DataFrame
          ) -> plt.Figure:
    """One experiment: a column of panels per rate (the paper's ramps: one rate each)."""
    rates = list(dict.fromkeys(t["rate_mbit"]))
    levels = t["level"].notna().any()
    heights = [0.6, 1.6] + ([0.8] if levels else [])
    fig, grid = plt.subplots(len(heights), len(rates), sharex="col", squeeze=False,
                             figsize=(8.5 * len(rates), 1.2 + 1.9 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    for c, rate in enumerate(rates):
        col = [grid[0][c], grid[1][c], grid[2][c] if levels else None]
        _column(col, inp, t[_same_rate(t["rate_mbit"], rate)],
                rows[_same_rate(rows["rate_mbit"], rate)],
                runs[_same_rate(runs["rate_mbit"], rate)])
    fig.align_ylabels(fig.axes)  # those left (a rate without an adaptive method: no levels)
    n = int(t["seeds_total"].max())
    fig.suptitle(f"Throughput per window of constant competing streams: mean and 95 % "
                 f"t-interval over up to {n} seed{'s' if n != 1 else ''} (dots: runs)",
                 fontsize=9)
    fig.plotted = t.reset_index(drop=True)
    return fig


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure | list[plt.Figure]:
    """One page per ramp experiment (module docstring)."""
    runs = sel[[ramps.is_ramp(inp.folder(r).config) for r in sel["run"]]] if not sel.empty \
        else sel
    if runs.empty:
        raise NoData("no ramp runs (a timeline of cross_start/cross_stop only, "
                     "timeline_origin: first_step)")
    rows = ramps.per_run(inp.folders, runs)
    table = ramps.summarise(rows)
    if table.empty:
        raise NoData("no window of the ramp that a run covers by half")
    pages = [_page(inp, t, rows[rows["experiment"] == exp], runs[runs["experiment"] == exp])
             for exp, t in table.groupby("experiment", sort=True)]
    return pages if len(pages) > 1 else pages[0]


FIGURE = Figure(
    name="ramp",
    title="Congestion ramp: throughput and level per window of constant streams",
    caption="A ramp of competing iperf3 streams (the timeline's cross traffic, shaded by "
    "its stream count; top: the streams per window). Middle: training throughput (global "
    "samples/s over each window, a step's samples spread over its span, log axis) per "
    "method: the line at the mean over the seeds that cover at least half of the window, "
    "band and bar its " + style.INTERVAL + ", dots the runs; no mark where no run covers "
    "half of a window. Bottom: the level each adaptive method held longest in the window "
    "(over those seeds' time) and the share of the time it held. Table: ramp.csv.",
    needs="finished ramp runs (a timeline of cross_start/cross_stop only, "
    "timeline_origin: first_step)",
    runs=select,
    draw=draw,
)
