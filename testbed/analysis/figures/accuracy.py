"""Accuracy vs training time: one line per method (mean over seeds on a shared time grid,
each seed held at its last value between evaluations), every seed as a thin line, the mean
time to target as a star; one panel per rate.

The experiment that shows something: among the runs of kind tta (else all), the experiment
whose runs reached the target most often (then came nearest to it), at the rates where some
run reached it (at most four), else at its rate whose runs came nearest -- and then the
title says that no run reached the target and how near the best came (a 3-second
throughput run at 25 Mbit/s is not an accuracy curve). A single run folder draws its own.
Language models record no accuracy: their training loss (5-step mean) is drawn instead.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from testbed.analysis import tables
from testbed.analysis.figures import Figure, Inputs, NoData, style


def _score(g: pd.DataFrame) -> tuple[float, float, int]:
    """How much a group of runs shows: the share that reached the target, then how near
    the best came (final accuracy / target), then how many runs."""
    ratio = (g["final_accuracy"] / g["target_accuracy"]).replace([np.inf, -np.inf], np.nan)
    return (float(g["reached_target"].mean()),
            float(ratio.max()) if ratio.notna().any() else 0.0, len(g))


def select(inp: Inputs) -> pd.DataFrame:
    """One experiment, the one that shows the most (module doc): of the ``tta`` runs if
    any, else of all; its rates at which some run reached the target (at most four: the
    lowest, the highest and two between), else its one rate whose runs came nearest."""
    r = tables.ok_runs(inp.runs)
    if r.empty:
        return r
    pool = r[r["kind"] == "tta"]
    pool = pool if not pool.empty else r
    keyed = pool.assign(_rate=pool["rate_mbit"].fillna(-1.0))
    groups = {k: g for k, g in keyed.groupby(["experiment", "_rate"], sort=True)}
    exp = max(dict.fromkeys(e for e, _ in groups),
              key=lambda e: max(_score(g) for (x, _), g in groups.items() if x == e))
    mine = {rate: g for (x, rate), g in groups.items() if x == exp}
    hit = sorted(rate for rate, g in mine.items() if g["reached_target"].any())
    if hit:
        rates = hit if len(hit) <= 4 else [hit[round(i * (len(hit) - 1) / 3)] for i in range(4)]
    else:
        rates = [max(mine, key=lambda rate: _score(mine[rate]))]
    return pd.concat([mine[rate] for rate in rates]).drop(columns="_rate")


def why_nothing(sel: pd.DataFrame) -> str:
    """"" when a run drawn reached its target; else a line saying none did and how near."""
    if sel.empty or sel["reached_target"].any() or sel["target_accuracy"].isna().all():
        return ""
    return (f"no run reached the target {sel['target_accuracy'].max():g} (best final "
            f"accuracy {sel['final_accuracy'].max():.3f}; "
            f"{'short runs: throughput only' if (sel['kind'] == 'throughput').all() else 'stopped before it'})")


def _curve(steps: pd.DataFrame, use_acc: bool) -> tuple[np.ndarray, np.ndarray] | None:
    tc = tables.train_clock(steps)
    if use_acc:
        cur = tables.evaluations(steps)
        y = "accuracy"
    else:  # LM: training loss of rank 0, smoothed over 5 steps
        cur = tables.training_step_rows(steps)
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
    if not use_acc and not ("loss" in steps.columns and steps["loss"].notna().any()):
        # an own job that never called hooks.report: an empty frame of axes said nothing
        raise NoData("the runs recorded no accuracy and no loss (an own job reports them "
                     "with hooks.report(accuracy=..., loss=...))")
    rates = sorted(sel["rate_mbit"].dropna().unique()) or [np.nan]
    fig, axes = plt.subplots(1, len(rates), figsize=(6.6 * len(rates), 4.6), squeeze=False,
                             sharey=True)
    plotted: list[dict] = []
    why = why_nothing(sel)
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
                mean, half, n = tables.ci95(g["tta_s"])
                ax.errorbar([mean], [target.iloc[0]], xerr=[half] if half == half else None,
                            marker="*", ms=13, color=color, mec="k", zorder=5, ls="none",
                            capsize=4)
                plotted.append({"experiment": at["experiment"].iloc[0], "rate_mbit": rate,
                                "method": m, "value": mean, "half": half, "seeds": n})
        if use_acc and not target.empty:
            ax.axhline(target.iloc[0], color="k", ls="--", lw=1,
                       label=f"target {target.iloc[0]:.2f} (★ mean time to it)")
        where = f" at {style.rate_text(rate)}" if rate == rate else ""
        ax.set_title(f"{at['experiment'].iloc[0]}{where}" + (f"\n{why}" if why else ""),
                     fontsize=9)
        ax.set_xlabel(style.TRAIN_TIME_AXIS.replace("(s ", f"({style.time_unit(sel)} "))
        ax.grid(True, alpha=0.3)
        style.legend(ax, ncol=2 if at["method"].nunique() > 3 else 1)
    axes[0][0].set_ylabel(style.ACCURACY_AXIS if use_acc else style.LOSS_AXIS)
    fig.plotted = pd.DataFrame(plotted)
    return fig


FIGURE = Figure(
    name="accuracy_vs_time",
    title="Accuracy vs training time",
    caption="Held-out accuracy on the workers' training clock (seconds since the first "
    "training step), one panel per rate. Thick: mean over seeds per method; thin: single "
    "seeds; dashed: the target; star: mean time to target with its 95 % t-interval over "
    "seeds (drawn when every seed reached it). The experiment drawn is the one whose runs "
    "reach the target (or come nearest; the title says so when none does).",
    needs="finished runs",
    runs=select,
    draw=draw,
)
