"""The crossover: time to the target per fixed ladder level against the link rate.

Per static rate and fixed level, the mean step time times the level's steps to the target
(its convergence table, or the sweep's own fixed runs that reached it): the time to the
target on a link of that rate. The best level per rate is ringed; where the best level
changes, a dashed line marks the interpolated crossover rate. Drawn only for static
(``throughput``) experiments whose steps to target are known.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from testbed.analysis import ideal, tables
from testbed.analysis.figures import Figure, Inputs, NoData, style


def select(inp: Inputs) -> pd.DataFrame:
    """The static runs, when their steps to target are known (else nothing to draw)."""
    r = tables.ok_runs(inp.runs)
    if r.empty or ideal.crossover_tables(inp.root, inp.runs, inp.steps)[0].empty:
        return r.iloc[0:0]
    return r[r["kind"] == "throughput"]


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    table, crossings = ideal.crossover_tables(inp.root, inp.runs, inp.steps)
    if table.empty:
        raise NoData("no static (throughput) experiment with a convergence table or with "
                     "fixed runs of its sweep that reached the target")
    exps = list(dict.fromkeys(table["experiment"]))
    fig, axes = plt.subplots(1, len(exps), figsize=(6.5 * len(exps), 4.2), squeeze=False,
                             layout="constrained")
    for ax, exp in zip(axes[0], exps, strict=True):
        e = table[table["experiment"] == exp]
        for method, g in e.groupby("method", sort=False):
            g = g.sort_values("rate_mbit")
            ax.plot(g["rate_mbit"], g["time_to_target_s"], marker="o", ms=4,
                    color=inp.color(str(method)), label=str(method))
        b = e[e["best"]]
        ax.scatter(b["rate_mbit"], b["time_to_target_s"], s=110, facecolors="none",
                   edgecolors="black", linewidths=1.2, label="best at that rate", zorder=5)
        for c in crossings:
            if c["experiment"] == exp and np.isfinite(c["crossover_mbit"]):
                ax.axvline(c["crossover_mbit"], color="grey", ls="--", lw=1)
                ax.text(c["crossover_mbit"], 0.98,
                        f" {c['below']} | {c['above']}\n ~{c['crossover_mbit']:.0f} Mbit/s",
                        transform=ax.get_xaxis_transform(), fontsize=7, va="top")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("bottleneck rate (Mbit/s)")
        ax.set_ylabel("time to target (s)")
        source = e["steps_source"].iloc[0] if "steps_source" in e else ""
        ax.set_title(f"{exp}: best fixed level per rate ({source})", fontsize=9)
        style.legend(ax, fontsize=7)
    return fig


FIGURE = Figure(
    name="crossover",
    title="The crossover: best fixed level per rate",
    caption="Per static rate and fixed ladder level: mean step time times the level's steps "
    "to the target (its convergence table, or the sweep's own fixed runs), i.e. the time to "
    "the target on a link of that rate; ringed: the best level there; dashed: where two best "
    "levels' curves cross (log-linear interpolation between the two rates).",
    needs="static (throughput) runs of fixed levels with known steps to target",
    runs=select,
    draw=draw,
)
