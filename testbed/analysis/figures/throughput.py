"""Throughput vs bottleneck rate: every run as a dot, the mean per method as a marker with
its 95 % t-interval over seeds (markers only: no line between two measured rates), and the
line-rate model (dashed: a formula, drawn as a curve over the measured span).

The line-rate model is samples/s if a step cost its measured compute time plus a dense fp32
ring allreduce of the model's gradient at the link rate (no overlap, no protocol overhead):
the ceiling plain allreduce would reach if the network were the only cost. A rate axis needs
two rates at least: one run, or runs at one rate, are not drawn here (the tables hold them).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from testbed.analysis import loading, tables
from testbed.analysis.figures import Figure, Inputs, NoData, style


def select(inp: Inputs) -> pd.DataFrame:
    """Runs of kind throughput; else the experiments run at two or more rates."""
    r = tables.ok_runs(inp.runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "throughput"]
    if sel.empty:
        multi = r.groupby("experiment")["rate_mbit"].nunique()
        sel = r[r["experiment"].isin(multi[multi >= 2].index)]
    if sel["rate_mbit"].nunique() < 2:
        return sel.iloc[0:0]
    return sel


def grad_bytes(run: loading.RunData | Path) -> float:
    """Dense gradient bytes from rank 0's start record (``RunData.start_record``: start.json
    of a packed run folder, or workers/rank0.jsonl), else NaN."""
    start = loading.folder_of(run).start_record()
    return float(start.get("grad_bytes") or math.nan) if start else math.nan


def line_rate_model(runs: pd.DataFrame, steps: pd.DataFrame,
                    folders: loading.Folders | Path) -> pd.DataFrame:
    """Per experiment and rate: samples/s of compute + dense ring allreduce at the link rate.

    compute: the median of rank 0's ``compute_s`` over the experiment's runs (it does not
    depend on the rate); gradient bytes from the workers' start record; world size from
    config.json; a ring allreduce moves 2(N-1)/N of the gradient over each worker's link.
    """
    folders = loading.folders_of(folders)
    rows = []
    for exp, g in runs.groupby("experiment"):
        s = steps[steps["run"].isin(g["run"])] if not steps.empty else steps
        s = tables.training_step_rows(s) if not s.empty else s
        if s.empty or "compute_s" not in s.columns:
            continue
        s0 = s[s["rank"] == 0]
        compute = float(s0["compute_s"].median())
        samples = float(s0["samples"].median())
        gb = next((b for b in (grad_bytes(folders[r]) for r in g["run"]) if b == b), math.nan)
        cfg = folders[g["run"].iloc[0]].config
        world = cfg.get("world_size")
        if not (isinstance(world, int) and world > 1 and gb == gb and compute > 0):
            continue
        measured = sorted(g["rate_mbit"].dropna().unique())
        grid = np.geomspace(measured[0], measured[-1], 40) if len(measured) > 1 else measured
        for rate in grid:
            comm = 2 * (world - 1) / world * gb * 8 / (float(rate) * 1e6)
            rows.append({"experiment": exp, "rate_mbit": float(rate),
                         "samples_per_s": samples / (compute + comm)})
    return pd.DataFrame(rows, columns=["experiment", "rate_mbit", "samples_per_s"])


#: The paper's form: one panel per model, a row per topology (``panel_order``).
PANELS_PER_ROW = 3


def panel_order(exps: list[str]) -> list[str]:
    """Experiments named ``<sweep>/<model>-<topology>`` (the paper grid's) in rows of one
    topology, a model per column, as the paper's figure; others keep their order."""
    def key(e: str) -> tuple[str, int]:
        model, _, topo = e.rsplit("/", 1)[-1].partition("-")
        return (topo, exps.index(e)) if topo else ("", exps.index(e))
    return sorted(exps, key=key)


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    if sel.empty:
        raise NoData("no runs at two or more rates")
    bound = line_rate_model(sel, inp.steps, inp.folders)
    exps = panel_order(list(dict.fromkeys(sel["experiment"])))
    cols = min(len(exps), PANELS_PER_ROW)
    rows = math.ceil(len(exps) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.8 * cols, 4.4 * rows), squeeze=False)
    for ax in axes.flat[len(exps):]:
        ax.set_visible(False)
    plotted = []
    for ax, exp in zip(axes.flat, exps, strict=False):
        e = sel[sel["experiment"] == exp]
        methods = sorted(e["method"].unique())
        n_seeds = 0
        for k, m in enumerate(methods):
            g = e[e["method"] == m]
            color = inp.color(m)
            # each method a little apart in x (log axis), so intervals do not hide each other
            off = 10 ** (0.015 * (k - (len(methods) - 1) / 2))
            pts = []
            for rate, gr in g.groupby("rate_mbit"):
                mean, half, n = tables.ci95(gr["throughput"])
                n_seeds = max(n_seeds, n)
                pts.append((rate, mean, half))
                plotted.append({"experiment": exp, "rate_mbit": rate, "method": m,
                                "value": mean, "half": half, "seeds": n})
                ax.scatter(np.full(len(gr), rate * off), gr["throughput"], s=12, color=color,
                           alpha=0.45, lw=0, zorder=5)
            pts.sort()
            err = [0.0 if p[2] != p[2] else p[2] for p in pts]
            # markers only: the rates between two measured ones were not measured
            ax.errorbar([p[0] * off for p in pts], [p[1] for p in pts],
                        yerr=err if any(err) else None, ls="none", marker="o", ms=5,
                        capsize=3, label=m, color=color, zorder=4,
                        mew=1.6 if m == style.ADAPTIVE else 1.0)
        b = bound[bound["experiment"] == exp].sort_values("rate_mbit")
        if not b.empty:  # a formula, so a curve: drawn over the measured span only
            ax.plot(b["rate_mbit"], b["samples_per_s"], color="k", ls="--", lw=1, zorder=2,
                    label="line-rate model (compute + dense allreduce)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted(e["rate_mbit"].dropna().unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        if len(rates) == 1:  # one rate so far (a part of a grid): the methods' offsets only
            ax.set_xlim(rates[0] / 1.6, rates[0] * 1.6)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        style.log_ticks(ax)
        ax.set_xlabel(style.RATE_AXIS)
        unit = style.time_unit(sel)
        ax.set_ylabel(style.THROUGHPUT_AXIS if unit == "s" else
                      style.THROUGHPUT_AXIS.replace("samples/s", f"samples per {unit}"))
        ax.set_title(f"{exp}: mean, 95 % t-interval over {n_seeds} seeds (dots: runs)"
                     if n_seeds > 1 else f"{exp}: one seed per point", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        # below the axes: inside, it covered the points of the low rates
        style.legend(ax, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.plotted = pd.DataFrame(plotted)
    return fig


FIGURE = Figure(
    name="throughput_vs_rate",
    title="Throughput vs bottleneck rate",
    caption="Training throughput (global samples/s, first step excluded) vs bottleneck rate, "
    "both axes log. Dots: single runs; markers with bars: mean per method and its 95 % "
    "t-interval over seeds (two or more seeds), at the measured rates only -- no line joins "
    "two rates, nothing was measured between them; dashed: the line-rate model (measured "
    "compute time plus a dense fp32 ring allreduce of the gradient at the link rate), a "
    "formula drawn over the measured span.",
    needs="runs of kind throughput, or one experiment run at two or more rates",
    runs=select,
    draw=draw,
)
