"""Accuracy vs training time: one line per method (mean over seeds on a shared time grid,
each seed held at its last value between evaluations), every seed as a thin line, the mean
time to target as a star; one panel per rate.

Runs of kind tta; else the lowest rate of the throughput runs (where the network matters
most); else the first experiment's finished runs -- a single run folder draws its own curve.
Language models record no accuracy: their training loss (5-step mean) is drawn instead.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from testbed.analysis import tables
from testbed.analysis.figures import Figure, Inputs, NoData, style
from testbed.analysis.figures import throughput as throughput_figure


def select(inp: Inputs) -> pd.DataFrame:
    r = tables.ok_runs(inp.runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "tta"]
    if sel.empty:
        thr = throughput_figure.select(inp)
        base = thr if not thr.empty else r
        e = base[base["experiment"] == base["experiment"].iloc[0]]
        low = e["rate_mbit"].min()
        sel = e[e["rate_mbit"] == low] if pd.notna(low) else e
    return sel


def _curve(steps: pd.DataFrame, use_acc: bool) -> tuple[np.ndarray, np.ndarray] | None:
    tc = tables.train_clock(steps)
    if use_acc:
        cur = tables._evals(steps)
        y = "accuracy"
    else:  # LM: training loss of rank 0, smoothed over 5 steps
        cur = tables.step_rows(steps)
        cur = cur[cur["rank"] == cur["rank"].min()].sort_values(tc)
        cur = cur.assign(loss=cur["loss"].rolling(5, min_periods=1).mean())
        y = "loss"
    if cur.empty:
        return None
    return cur[tc].to_numpy(float), cur[y].to_numpy(float)


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    if sel.empty:
        raise NoData("no finished runs")
    steps = inp.steps[inp.steps["run"].isin(sel["run"])]
    use_acc = "accuracy" in steps.columns and steps["accuracy"].notna().any()
    rates = sorted(sel["rate_mbit"].dropna().unique()) or [np.nan]
    fig, axes = plt.subplots(1, len(rates), figsize=(6.6 * len(rates), 4.6), squeeze=False,
                             sharey=True)
    for ax, rate in zip(axes[0], rates, strict=True):
        at = sel[sel["rate_mbit"] == rate] if rate == rate else sel
        target = at["target_accuracy"].dropna()
        for m, g in at.sort_values(["method", "seed"]).groupby("method"):
            color = inp.color(m)
            curves = [c for c in (_curve(steps[steps["run"] == run], use_acc)
                                  for run in g["run"]) if c is not None]
            for t, y in curves:
                ax.plot(t, y, color=color, lw=0.7, alpha=0.35, drawstyle="steps-post")
            if not curves:
                continue
            # the mean exists only where every seed has a value
            t_start = max(c[0][0] for c in curves)
            t_end = max(t_start, min(c[0][-1] for c in curves))
            grid = np.linspace(t_start, t_end, 200)
            held = [c[1][np.clip(np.searchsorted(c[0], grid, side="right") - 1, 0, None)]
                    for c in curves]
            ax.plot(grid, np.mean(held, axis=0), color=color, drawstyle="steps-post",
                    lw=2.4 if m == style.ADAPTIVE else 1.6,
                    label=f"{m} (mean of {len(curves)} seeds)" if len(curves) > 1 else m)
            if use_acc and g["reached_target"].all() and not target.empty:
                ax.plot([g["tta_s"].mean()], [target.iloc[0]], marker="*", ms=13, color=color,
                        mec="k", zorder=5, ls="none")
        if use_acc and not target.empty:
            ax.axhline(target.iloc[0], color="k", ls="--", lw=1,
                       label=f"target {target.iloc[0]:.2f} (★ mean time to it)")
        where = f" at {style.rate_text(rate)}" if rate == rate else ""
        ax.set_title(f"{at['experiment'].iloc[0]}{where}", fontsize=9)
        ax.set_xlabel(style.TRAIN_TIME_AXIS)
        ax.grid(True, alpha=0.3)
        style.legend(ax, ncol=2 if at["method"].nunique() > 3 else 1)
    axes[0][0].set_ylabel(style.ACCURACY_AXIS if use_acc else style.LOSS_AXIS)
    return fig


FIGURE = Figure(
    name="accuracy_vs_time",
    title="Accuracy vs training time",
    caption="Held-out accuracy on the workers' training clock (seconds since the first "
    "training step), one panel per rate. Thick: mean over seeds per method; thin: single "
    "seeds; dashed: the target; star: mean time to target (drawn when every seed reached it).",
    needs="finished runs (kind tta, else the lowest rate of the throughput runs)",
    runs=select,
    draw=draw,
)
