"""Any runs side by side: ``netsense compare RUN_OR_FOLDER...``.

Why its own module: ``plot`` and ``report`` read one results tree and ask it research
questions (speedup per rate, the oracle); comparing is simpler and wider -- runs from any
folders (two scenarios, yesterday's and today's code, a sweep and a single run), grouped so
that repeated seeds of one condition become one row with an interval.

A group is (source, experiment, rate, method): the source is the argument the run came
from, so the same method in two folders stays two rows. Per group: runs (seeds), mean
throughput, time to accuracy and final accuracy with the half-width of their 95 % t-interval
over seeds (``tables.ci95``; none with one seed; TTA only when every seed reached the
target, with how many did), and the megabytes sent. Definitions are the tables' own
(``testbed.analysis.tables``). The figure puts every run's accuracy, step time and level on
shared axes of the training clock, one colour per group.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from testbed.analysis import tables
from testbed.analysis.figures import NoData, style
from testbed.analysis.figures import timeline as timeline_figure
from testbed.analysis.results import Results

COLUMNS = ["group", "source", "experiment", "rate_mbit", "method", "runs", "throughput",
           "throughput_ci", "steps_per_s", "steps_per_s_ci", "tta_s", "tta_ci", "reached",
           "final_accuracy",
           "final_accuracy_ci", "mb_sent", "compute", "dilation", "overrun_share",
           "host_other_pct", "degraded"]


def _names(paths: list[Path]) -> list[str]:
    """Short, distinct names for the sources: the folder name, with parents when two clash."""
    parts = [p.resolve().parts for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def load(paths: list[Path], *, include_degraded: bool = False
         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, steps) of every run folder under the given folders, ``run`` made absolute and
    a ``source`` column naming the argument each came from; damaged folders are named in
    ``runs.attrs["excluded"]`` as ``tables.load_runs`` does."""
    runs_parts, step_parts, excluded = [], [], []
    for path, name in zip(paths, _names(paths), strict=True):
        res = Results.load(path)  # the one run reader
        runs, steps = res.runs, res.steps
        excluded += res.excluded
        if runs.empty:
            continue
        absolute = {r: str((path / r).resolve()) for r in runs["run"]}
        runs_parts.append(runs.assign(source=name, run=runs["run"].map(absolute)))
        if not steps.empty:
            step_parts.append(steps.assign(run=steps["run"].map(absolute)))
    runs = pd.concat(runs_parts, ignore_index=True) if runs_parts else pd.DataFrame()
    runs.attrs["excluded"] = excluded
    tables.include_degraded(runs, include_degraded)
    steps = pd.concat(step_parts, ignore_index=True) if step_parts else pd.DataFrame()
    return runs, steps


def _group_label(source: str, exp: str, rate: float, method: str, multi: dict[str, bool]
                 ) -> str:
    bits = [source] if multi["source"] else []
    if multi["experiment"]:
        bits.append(exp)
    if multi["rate"] and rate == rate:
        bits.append(style.rate_text(rate))
    bits.append(method)
    return " · ".join(bits)


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``tables.ok_runs`` per source: the same seed in two folders is two runs here; a
    degraded run only when ``load`` was told to include them."""
    if runs.empty:
        return runs
    parts = []
    for _, g in runs.groupby("source", sort=False):
        g = g.copy()
        g.attrs["include_degraded"] = runs.attrs.get("include_degraded", False)
        parts.append(tables.ok_runs(g))
    return pd.concat(parts) if parts else runs.iloc[0:0]


def degraded_left_out(runs: pd.DataFrame) -> int:
    """Finished degraded runs left out of the groups (0 when included)."""
    return tables.degraded_left_out(runs)


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per group (module docstring), in the order the sources were given."""
    ok = ok_runs(runs)
    if ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["source", "experiment", "rate_mbit", "method"]
    multi = {"source": ok["source"].nunique() > 1, "experiment": ok["experiment"].nunique() > 1,
             "rate": ok["rate_mbit"].nunique() > 1}
    order = {s: i for i, s in enumerate(dict.fromkeys(runs["source"]))}
    rows = []
    for (src, exp, rate, m), g in ok.groupby(keys, dropna=False, sort=False):
        thr, thr_ci, n = tables.ci95(g["throughput"])
        reached = int(g["reached_target"].sum())
        tta, tta_ci, _ = tables.ci95(g["tta_s"]) if reached == len(g) else (math.nan,) * 3
        sps, sps_ci, _ = tables.ci95(g["steps_per_s"]) if "steps_per_s" in g else (math.nan,) * 3
        silent = tables._reported(g) == 0  # an own job that reported no accuracy
        acc, acc_ci, _ = tables.ci95(g["final_accuracy"])
        sent = pd.to_numeric(g["bytes_sent_total"], errors="coerce").mean() / 1e6
        compute = ", ".join(dict.fromkeys(g["compute"].astype(str))) \
            if "compute" in g.columns else "native"
        rows.append({"group": _group_label(src, exp, rate, m, multi), "source": src,
                     "experiment": exp, "rate_mbit": rate, "method": m, "runs": n,
                     "throughput": thr, "throughput_ci": thr_ci, "steps_per_s": sps,
                     "steps_per_s_ci": sps_ci, "tta_s": tta, "tta_ci": tta_ci,
                     "reached": tables.NOT_REPORTED if silent else f"{reached}/{len(g)}",
                     "final_accuracy": acc, "final_accuracy_ci": acc_ci, "mb_sent": sent,
                     "compute": compute,
                     "dilation": float(g["dilation"].max()) if "dilation" in g else 1.0,
                     "overrun_share": float(g["overrun_share"].mean())
                     if "overrun_share" in g and g["overrun_share"].notna().any() else math.nan,
                     "host_other_pct": float(g["host_other_pct"].mean())
                     if "host_other_pct" in g and g["host_other_pct"].notna().any()
                     else math.nan,
                     "degraded": f"{int(tables.is_degraded(g).sum())} degraded (counted)"
                     if tables.is_degraded(g).any() else "",
                     "_order": order.get(src, 0)})
    out = pd.DataFrame(rows).sort_values(["_order", "experiment", "rate_mbit", "method"],
                                         kind="stable")
    return out.drop(columns="_order").reset_index(drop=True)[COLUMNS]


def _rank0(steps: pd.DataFrame) -> pd.DataFrame:
    s = tables.training_step_rows(steps)
    if s.empty:
        return s
    return s[s["rank"] == s["rank"].min()].sort_values(tables.train_clock(s))


def figure(runs: pd.DataFrame, steps: pd.DataFrame, groups: pd.DataFrame) -> plt.Figure:
    """Accuracy, step time and level of every run on one training-clock axis."""
    ok = ok_runs(runs)
    if ok.empty or steps.empty:
        raise NoData("no finished run with step records")
    label_of = {(r.source, r.experiment, r.rate_mbit, r.method): r.group
                for r in groups.itertuples()}
    colors = _group_colors(groups)
    # the levels of the runs drawn: a method whose runs were all left out (degraded) drew an
    # empty row (PowerSGD's on accel-crossover/d70)
    cats = _levels(steps[steps["run"].isin(set(ok["run"]))] if "run" in steps else steps)
    panels = 3 if cats else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 2.6 * panels + 0.8), sharex=True,
                             gridspec_kw={"height_ratios": [1.4, 1.2, 0.8][:panels]})
    use_acc = "accuracy" in steps.columns and steps["accuracy"].notna().any()
    for r in ok.itertuples():
        lab = label_of.get((r.source, r.experiment, r.rate_mbit, r.method))
        s_all = steps[steps["run"] == r.run]
        if lab is not None and not s_all.empty:
            _plot_run(axes, s_all, lab, colors[lab], use_acc, cats)
    _label(axes, cats, use_acc, style.time_unit(ok))
    axes[0].set_title(f"{len(ok)} runs in {len(groups)} groups (one colour per group)",
                      fontsize=9)
    return fig


def _group_colors(groups: pd.DataFrame) -> dict[str, Any]:
    """{group: colour}: the method's own colour (figures.style) when there is one group per
    method, else one per group from a qualitative colour map."""
    labels = list(groups["group"])
    one_each = groups["method"].is_unique
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {lab: style.method_color(m) if one_each else cmap(i % cmap.N)
            for i, (lab, m) in enumerate(zip(labels, groups["method"], strict=True))}


def _levels(steps: pd.DataFrame) -> list[str]:
    """The levels the runs used, in the ladder's order (then any other, as met)."""
    levels = [lv for lv in dict.fromkeys(steps["level"].dropna())
              if isinstance(lv, str)] if "level" in steps.columns else []
    return [c for c in timeline_figure.LEVEL_ORDER if c in levels] + [
        c for c in levels if c not in timeline_figure.LEVEL_ORDER]


def _plot_run(axes: Any, s_all: pd.DataFrame, lab: str, c: Any, use_acc: bool,
              cats: list[str]) -> None:
    """One run's accuracy (or loss), step time and level, on the training clock."""
    tc = tables.train_clock(s_all)
    if use_acc:
        ev = tables.evaluations(s_all)
        if not ev.empty:
            axes[0].plot(ev[tc], ev["accuracy"], drawstyle="steps-post", color=c, lw=1.4,
                         label=lab)
    s = _rank0(s_all)
    if not use_acc and "loss" in s.columns:
        axes[0].plot(s[tc], s["loss"].rolling(5, min_periods=1).mean(), color=c, lw=1.2,
                     label=lab)
    if "step_s" in s.columns and not s.empty:
        axes[1].plot(s[tc], s["step_s"].rolling(5, min_periods=1, center=True).median(),
                     color=c, lw=1.0, label=lab)
    if cats and "level" in s.columns:
        lv = s["level"].map({k: i for i, k in enumerate(cats)})
        axes[2].plot(s[tc], lv, drawstyle="steps-post", color=c, lw=1.0, label=lab)


def _label(axes: Any, cats: list[str], use_acc: bool, unit: str) -> None:
    """Axis labels with units, the level ticks, the grid and the legend."""
    axes[0].set_ylabel(style.ACCURACY_AXIS if use_acc else style.LOSS_AXIS)
    axes[1].set_yscale("log")
    style.log_ticks(axes[1])
    axes[1].set_ylabel(f"step time\n({unit}, 5-step median, log)")
    if cats:
        axes[2].set_yticks(range(len(cats)), cats, fontsize=7)
        axes[2].set_ylim(-0.5, len(cats) - 0.5)
        axes[2].set_ylabel(style.LEVEL_AXIS)
    axes[-1].set_xlabel(style.TRAIN_TIME_AXIS.replace("(s ", f"({unit} "))
    for ax in axes:
        ax.grid(True, alpha=0.3)
    style.legend(axes[0], fontsize=7, loc="best")
    axes[0].figure.align_ylabels(list(axes))
