"""The crossover: time to the target per fixed ladder level against the link rate.

Per static rate and fixed level, the mean step time times the level's steps to the target
(its convergence table, or the sweep's own fixed runs that reached it): the time to the
target on a link of that rate, as markers at the measured rates only (no line between
rates: nothing was measured there), with the 95 % t-interval of the step time over seeds.
The best level per rate is ringed; where the best level changes, a vertical line marks the
interpolated crossover rate, named in the legend (never as text over the curves). Drawn only for static
(``throughput``) experiments whose steps to target are known.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from testbed.analysis import tables
from testbed.analysis.figures import Figure, Inputs, NoData, style


def select(inp: Inputs) -> pd.DataFrame:
    """The static runs, when their steps to target are known (else nothing to draw)."""
    r = tables.ok_runs(inp.runs)
    if r.empty or inp.crossover()[0].empty:
        return r.iloc[0:0]
    return r[r["kind"] == "throughput"]


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    table, crossings = inp.crossover()
    if table.empty:
        raise NoData("no static (throughput) experiment with a convergence table or with "
                     "fixed runs of its sweep that reached the target")
    exps = list(dict.fromkeys(table["experiment"]))
    fig, axes = plt.subplots(1, len(exps), figsize=(6.5 * len(exps), 4.4), squeeze=False,
                             layout="constrained")
    plotted = []
    for ax, exp in zip(axes[0], exps, strict=True):
        e = table[table["experiment"] == exp]
        methods = list(dict.fromkeys(e["method"]))
        rates = sorted(e["rate_mbit"].unique())
        # a small offset per level in log x so the error bars of one rate do not overlap
        offs = {m: 10 ** (0.012 * (i - (len(methods) - 1) / 2)) for i, m in enumerate(methods)}
        for method in methods:
            g = e[e["method"] == method].sort_values("rate_mbit")
            half = g["step_ms_ci95"] / 1000 * g["steps_to_target"]
            ax.errorbar(g["rate_mbit"] * offs[method], g["time_to_target_s"],
                        yerr=half.fillna(0).to_numpy(), ls="none", marker="o", ms=5, capsize=3,
                        color=inp.color(str(method)), label=str(method))
            for r, v, h in zip(g["rate_mbit"], g["time_to_target_s"], half, strict=True):
                plotted.append({"experiment": exp, "rate_mbit": r, "method": method,
                                "value": v, "lo": v - h, "hi": v + h})
        b = e[e["best"]]
        ax.scatter(b["rate_mbit"] * b["method"].map(offs), b["time_to_target_s"], s=130,
                   facecolors="none", edgecolors="black", linewidths=1.2,
                   label="best at that rate", zorder=5)
        styles = iter(("--", ":", "-.", (0, (5, 2, 1, 2))))
        for c in crossings:
            if c["experiment"] == exp and np.isfinite(c["crossover_mbit"]):
                # the legend names each crossing: text in the axes overprinted its neighbours
                ax.axvline(c["crossover_mbit"], color="grey", ls=next(styles, "--"), lw=1,
                           label=f"{c['below']} | {c['above']} at ~{c['crossover_mbit']:.0f} "
                           "Mbit/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(style.RATE_AXIS)
        ax.set_ylabel(f"time to target ({style.time_unit(sel)}, log)")
        source = e["steps_source"].iloc[0] if "steps_source" in e else ""
        seeds = int(e["seeds"].max()) if "seeds" in e else 0
        ax.set_title(f"{exp}: best fixed level per rate ({source}; {seeds} seeds)",
                     fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        style.legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.plotted = pd.DataFrame(plotted)
    return fig


FIGURE = Figure(
    name="crossover",
    title="The crossover: best fixed level per rate",
    caption="Per static rate and fixed ladder level (markers only, at the measured rates): "
    "mean step time times the level's steps to the target (its convergence table, or the "
    "sweep's own fixed runs), i.e. the time to the target on a link of that rate, with the "
    "step time's 95 % t-interval over seeds scaled by the same steps; ringed: the best level "
    "there; vertical lines (named in the legend): where two best levels' times cross, "
    "interpolated log-linearly between the two measured rates around it.",
    needs="static (throughput) runs of fixed levels with known steps to target",
    runs=select,
    draw=draw,
)
