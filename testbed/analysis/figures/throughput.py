"""Throughput vs bottleneck rate: every run as a dot, the mean per method as a line with a
95 % t-interval over seeds, and the line-rate model (dashed).

The line-rate model is samples/s if a step cost its measured compute time plus a dense fp32
ring allreduce of the model's gradient at the link rate (no overlap, no protocol overhead):
the ceiling plain allreduce would reach if the network were the only cost. A rate axis needs
two rates at least: one run, or runs at one rate, are not drawn here (the tables hold them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from testbed.analysis import tables
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


def grad_bytes(run_dir: Path) -> float:
    """Dense gradient bytes from rank 0's start record (workers/rank0.jsonl), else NaN."""
    try:
        with open(Path(run_dir) / "workers" / "rank0.jsonl") as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("kind") == "start":
                    return float(rec.get("grad_bytes") or math.nan)
    except (OSError, ValueError):
        pass
    return math.nan


def line_rate_model(runs: pd.DataFrame, steps: pd.DataFrame, root: Path) -> pd.DataFrame:
    """Per experiment and rate: samples/s of compute + dense ring allreduce at the link rate.

    compute: the median of rank 0's ``compute_s`` over the experiment's runs (it does not
    depend on the rate); gradient bytes from the workers' start record; world size from
    config.json; a ring allreduce moves 2(N-1)/N of the gradient over each worker's link.
    """
    rows = []
    for exp, g in runs.groupby("experiment"):
        s = steps[steps["run"].isin(g["run"])] if not steps.empty else steps
        s = tables.step_rows(s) if not s.empty else s
        if s.empty or "compute_s" not in s.columns:
            continue
        s0 = s[s["rank"] == 0]
        compute = float(s0["compute_s"].median())
        samples = float(s0["samples"].median())
        gb = next((b for b in (grad_bytes(root / r) for r in g["run"]) if b == b), math.nan)
        cfg = tables._read_json(root / g["run"].iloc[0] / "config.json")
        world = cfg.get("world_size")
        if not (isinstance(world, int) and world > 1 and gb == gb and compute > 0):
            continue
        for rate in sorted(g["rate_mbit"].dropna().unique()):
            comm = 2 * (world - 1) / world * gb * 8 / (float(rate) * 1e6)
            rows.append({"experiment": exp, "rate_mbit": float(rate),
                         "samples_per_s": samples / (compute + comm)})
    return pd.DataFrame(rows, columns=["experiment", "rate_mbit", "samples_per_s"])


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    if sel.empty:
        raise NoData("no runs at two or more rates")
    bound = line_rate_model(sel, inp.steps, inp.root)
    exps = list(dict.fromkeys(sel["experiment"]))
    fig, axes = plt.subplots(1, len(exps), figsize=(5.8 * len(exps), 4.4), squeeze=False)
    for ax, exp in zip(axes[0], exps, strict=True):
        e = sel[sel["experiment"] == exp]
        n_seeds = 0
        for m, g in e.groupby("method"):
            color = inp.color(m)
            pts = []
            for rate, gr in g.groupby("rate_mbit"):
                mean, half, n = tables.ci95(gr["throughput"])
                n_seeds = max(n_seeds, n)
                pts.append((rate, mean, half))
                # spread the dots a little in x (log axis) so seeds do not hide behind the mean
                spread = 10 ** (np.linspace(-0.012, 0.012, len(gr)) if len(gr) > 1
                                else np.zeros(1))
                ax.scatter(rate * spread, gr["throughput"], s=14, color=color, alpha=0.6,
                           lw=0, zorder=5)
            pts.sort()
            err = [0.0 if p[2] != p[2] else p[2] for p in pts]
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=err if any(err) else None, marker="o", ms=4, capsize=3, label=m,
                        color=color, lw=2.2 if m == style.ADAPTIVE else 1.3, zorder=4)
        b = bound[bound["experiment"] == exp].sort_values("rate_mbit")
        if not b.empty:
            ax.plot(b["rate_mbit"], b["samples_per_s"], color="k", ls="--", lw=1, zorder=2,
                    label="line-rate model (compute + dense allreduce)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted(e["rate_mbit"].dropna().unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        style.log_ticks(ax)
        ax.set_xlabel(style.RATE_AXIS)
        ax.set_ylabel(style.THROUGHPUT_AXIS)
        ax.set_title(f"{exp}: mean ± 95 % CI over {n_seeds} seeds (dots: runs)"
                     if n_seeds > 1 else f"{exp}: one seed per point", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        style.legend(ax, ncol=2)
    return fig


FIGURE = Figure(
    name="throughput_vs_rate",
    title="Throughput vs bottleneck rate",
    caption="Training throughput (global samples/s, first step excluded) vs bottleneck rate, "
    "both axes log. Dots: single runs; line: mean per method with a 95 % t-interval when "
    "there are two or more seeds; dashed: the line-rate model (measured compute time plus a "
    "dense fp32 ring allreduce of the gradient at the link rate).",
    needs="runs of kind throughput, or one experiment run at two or more rates",
    runs=select,
    draw=draw,
)
