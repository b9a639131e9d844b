"""The paper's figures, drawn with matplotlib (Agg) from run folders only.

Every number drawn here comes from the run folders through testbed.analysis.tables
(config.json / summary.json / steps.csv / events.csv / sweep.json / workers' start records);
nothing is typed in. ``make_figures`` writes PNG + PDF of:

1. ``throughput_vs_rate``   samples/s vs bottleneck rate (log-log): every run as a dot, the
   mean per method as a line, a 95 % t-interval when there are two or more seeds, and the
   line-rate model (dashed): samples/s if a step cost its measured compute time plus a dense
   fp32 ring allreduce of the model's gradient at the link rate (no overlap, no protocol
   overhead). Runs of kind ``throughput``; else experiments with two or more rates; else
   every finished run (one rate: a single-column figure).
2. ``accuracy_vs_time``     test accuracy (LM loss when no accuracy was recorded) on the
   workers' training clock: one line per method (mean over seeds on a shared time grid),
   every seed as a thin line, the mean time to target as a star. Runs of kind ``tta``, else
   the lowest rate of the throughput runs, else any finished runs.
3. ``adaptation_timeline``  the network as applied (rate changes, or the constant rate in
   the title; cross-traffic streams; the monitor's bandwidth estimate and the bottleneck's
   queue when recorded), the adaptive method's kept ratio and level (every level of the
   registry on the axis), and every method's step time, as steps with markers. Runs of kind
   ``timeline``, else runs whose events.csv has applied events (``netsense run
   star-congestion``), else the accuracy figure's runs.
4. ``speedup``              NetSenseML over each baseline per rate, throughput and time to
   accuracy, on one shared colour scale in "x", with the seed range in each cell.

Also writes the tables as CSV (runs.csv, throughput.csv, tta.csv, speedup.csv) and the
dynamic runs' per-step timeline.csv (testbed.analysis.timelines). Every run
folder can be plotted on its own: ``netsense plot -r results/smoke/<run id>``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from netsenseml import methods  # noqa: E402
from testbed.analysis import loading, tables, timelines  # noqa: E402
from testbed.common import files  # noqa: E402
from topologies import registry as topology_registry  # noqa: E402

FIGURES = ("throughput_vs_rate", "accuracy_vs_time", "adaptation_timeline", "speedup",
           "crossover")


class NoData(RuntimeError):
    """The results hold nothing a figure can be drawn from (message says what is missing)."""


#: Caption line drawn under every figure of this make_figures call (damaged runs left out).
_NOTE = {"text": ""}


def _colors(methods: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    others = [m for m in sorted(methods) if m != tables.ADAPTIVE]
    out = {m: cmap(i % 10) for i, m in enumerate(others, start=1)}
    out[tables.ADAPTIVE] = cmap(0)
    return out


def _save(fig: plt.Figure, out: Path, name: str) -> list[Path]:
    paths = []
    if _NOTE["text"]:
        fig.text(0.01, 0.0, _NOTE["text"], fontsize=7, color="firebrick", ha="left", va="top",
                 wrap=True)
    for ext in ("png", "pdf"):
        p = out / f"{name}.{ext}"
        with files.atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=130, bbox_inches="tight", format=ext)
        paths.append(p)
    plt.close(fig)
    return paths


def _rate_label(runs: pd.DataFrame) -> str:
    return "bottleneck rate (Mbit/s)"


# ------------------------------------------------------------------ 1. throughput vs rate


def throughput_runs(runs: pd.DataFrame) -> pd.DataFrame:
    r = tables.ok_runs(runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "throughput"]
    if sel.empty:
        multi = r.groupby("experiment")["rate_mbit"].nunique()
        sel = r[r["experiment"].isin(multi[multi >= 2].index)]
    return sel


#: two-sided 97.5 % quantiles of Student's t for n-1 = 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def ci95(values: Any) -> tuple[float, float, int]:
    """(mean, half-width of the 95 % t-interval, n); half-width NaN below two values."""
    v = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), dtype=float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, 0
    if n < 2:
        return float(v.mean()), math.nan, n
    t = _T975[n - 2] if n - 2 < len(_T975) else 1.96
    return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(n)), n


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


def _log_ticks(ax: Any) -> None:
    """Log y axis with plain-number labels, also when the data span less than a decade."""
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = ax.get_ylim()
    if hi / max(lo, 1e-12) < 10:  # too few major ticks: label the minor ones too
        ax.yaxis.set_minor_locator(matplotlib.ticker.LogLocator(base=10, subs="auto"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    else:
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def plot_throughput(runs: pd.DataFrame, out: Path, steps: pd.DataFrame | None = None,
                    root: Path | None = None) -> list[Path]:
    sel = throughput_runs(runs)
    if sel.empty:
        sel = tables.ok_runs(runs)
    if sel.empty:
        raise NoData("no finished runs")
    bound = line_rate_model(sel, steps, root) if steps is not None and root is not None \
        else pd.DataFrame(columns=["experiment", "rate_mbit", "samples_per_s"])
    exps = list(dict.fromkeys(sel["experiment"]))
    colors = _colors(list(sel["method"].unique()))
    fig, axes = plt.subplots(1, len(exps), figsize=(5.8 * len(exps), 4.4), squeeze=False)
    for ax, exp in zip(axes[0], exps, strict=True):
        e = sel[sel["experiment"] == exp]
        n_seeds = 0
        for m, g in e.groupby("method"):
            pts = []
            for rate, gr in g.groupby("rate_mbit"):
                mean, half, n = ci95(gr["throughput"])
                n_seeds = max(n_seeds, n)
                pts.append((rate, mean, half))
                # spread the dots a little in x (log axis) so that seeds do not hide
                # behind the mean's marker
                spread = 10 ** (np.linspace(-0.012, 0.012, len(gr)) if len(gr) > 1 else np.zeros(1))
                ax.scatter(rate * spread, gr["throughput"], s=14, color=colors[m],
                           alpha=0.6, lw=0, zorder=5)
            pts.sort()
            x = [p[0] for p in pts]
            y = [p[1] for p in pts]
            err = [0.0 if p[2] != p[2] else p[2] for p in pts]
            ax.errorbar(x, y, yerr=err if any(err) else None, marker="o", ms=4, capsize=3,
                        label=m, color=colors[m], lw=2.2 if m == tables.ADAPTIVE else 1.3,
                        zorder=4)
        b = bound[bound["experiment"] == exp].sort_values("rate_mbit")
        if not b.empty:
            ax.plot(b["rate_mbit"], b["samples_per_s"], color="k", ls="--", lw=1, zorder=2,
                    marker="_", ms=14, label="line-rate model (compute + dense allreduce)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted(e["rate_mbit"].dropna().unique())
        if rates:
            ax.set_xticks(rates, [f"{r:g}" for r in rates])
            if len(rates) == 1:
                ax.set_xlim(rates[0] / 2, rates[0] * 2)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        _log_ticks(ax)
        ax.set_xlabel(_rate_label(sel))
        ax.set_ylabel("training throughput (samples/s, log)")
        ax.set_title(f"{exp}  (dots: runs; line: mean ± 95 % CI over {n_seeds} seeds)"
                     if n_seeds > 1 else f"{exp}  (1 seed per point)", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, out, "throughput_vs_rate")


# ------------------------------------------------------------------ 2. accuracy vs time


def tta_runs(runs: pd.DataFrame) -> pd.DataFrame:
    r = tables.ok_runs(runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "tta"]
    if sel.empty:
        thr = throughput_runs(runs)
        base = thr if not thr.empty else r  # a lone run folder: its own experiment
        exp = base["experiment"].iloc[0]
        e = base[base["experiment"] == exp]
        low = e["rate_mbit"].min()
        sel = e[e["rate_mbit"] == low] if pd.notna(low) else e
    return sel


TIME_AXIS = "training clock (s): seconds since the workers' process group was up (t_worker)"


def plot_accuracy(runs: pd.DataFrame, steps: pd.DataFrame, out: Path) -> list[Path]:
    """One line per method: the mean over seeds on a shared time grid (each seed's curve
    held at its last value between evaluations); seeds as thin lines; ★ at the mean time to
    target of the methods whose every seed reached it."""
    sel = tta_runs(runs)
    if sel.empty:
        raise NoData("no finished runs for accuracy vs time (kind: tta)")
    colors = _colors(list(sel["method"].unique()))
    use_acc = "accuracy" in steps.columns and steps[steps["run"].isin(sel["run"])][
        "accuracy"].notna().any()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    target = sel["target_accuracy"].dropna()
    y = "accuracy" if use_acc else "loss"
    for m, g in sel.sort_values(["method", "seed"]).groupby("method"):
        curves = []
        for _, r in g.iterrows():
            s = steps[steps["run"] == r["run"]]
            tc = tables.train_clock(s)
            if use_acc:
                cur = tables._evals(s)
            else:  # LM: training loss of rank 0, smoothed over 5 steps
                cur = tables.step_rows(s)
                cur = cur[cur["rank"] == cur["rank"].min()].sort_values(tc)
                cur = cur.assign(loss=cur["loss"].rolling(5, min_periods=1).mean())
            if cur.empty:
                continue
            curves.append((cur[tc].to_numpy(float), cur[y].to_numpy(float)))
            ax.plot(cur[tc], cur[y], color=colors[m], lw=0.7, alpha=0.35,
                    drawstyle="steps-post")
        if not curves:
            continue
        # the mean exists only where every seed has a value: from the latest first evaluation
        # to the earliest last one
        t_start = max(c[0][0] for c in curves)
        t_end = max(t_start, min(c[0][-1] for c in curves))
        grid = np.linspace(t_start, t_end, 200)
        held = [c[1][np.clip(np.searchsorted(c[0], grid, side="right") - 1, 0, None)]
                for c in curves]
        n = len(curves)
        ax.plot(grid, np.mean(held, axis=0), color=colors[m],
                lw=2.4 if m == tables.ADAPTIVE else 1.6, drawstyle="steps-post",
                label=f"{m} (mean of {n})" if n > 1 else m)
        if use_acc and g["reached_target"].all() and not target.empty:
            ax.plot([g["tta_s"].mean()], [target.iloc[0]], marker="*", ms=13,
                    color=colors[m], mec="k", zorder=5)
    if use_acc and not target.empty:
        ax.axhline(target.iloc[0], color="k", ls="--", lw=1,
                   label=f"target {target.iloc[0]:.2f} (★ mean time to target)")
    rates = sorted(sel["rate_mbit"].dropna().unique())
    rate_s = f" at {', '.join(f'{x:g}' for x in rates)} Mbit/s" if rates else ""
    ax.set_title(f"{sel['experiment'].iloc[0]}{rate_s} (thin: single seeds)", fontsize=9)
    ax.set_xlabel(TIME_AXIS)
    ax.set_ylabel("held-out accuracy" if use_acc else "training loss (LM, 5-step mean)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out, "accuracy_vs_time")


# ------------------------------------------------------------------ 3. adaptation timeline


def read_events(run_dir: Path) -> pd.DataFrame:
    """events.csv (bounded and validated by analysis.loading); empty when absent or damaged."""
    try:
        return loading.read_csv_file(Path(run_dir) / "events.csv", ("t_applied",))
    except loading.Damaged:
        return pd.DataFrame(columns=["t_scheduled", "t_applied", "kind", "target", "value"])


def network_series(config: dict[str, Any], events: pd.DataFrame, t_end: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step series (t, value) of the configured rate and of the cross-traffic stream count.

    Start values come from config.json: each link's configured rate as its topology
    declares it (``topologies.registry``), no cross traffic. Each applied ``set_rate`` sets
    its link's rate, and the rate series is the lowest rate over the links training
    crosses (the topology's ``training_links``: a dumbbell's bottleneck and access links, a
    star's worker links); each ``cross_start`` adds ``value`` streams to its group (a ramp
    level adds its increment), ``cross_stop`` zeroes the group; the stream series sums the
    groups. A topology that cannot be read (a plug-in no longer importable) counts every
    link an event set, from its first rate-like field.
    """
    links, training = _link_rates(tables.find_key(config, "topology") or {})
    rate = [(0.0, _lowest(links, training))]
    groups: dict[str, float] = {}
    streams = [(0.0, 0.0)]
    ev = events.dropna(subset=["t_applied"]).sort_values("t_applied", kind="stable") \
        if not events.empty else events
    for _, e in ev.iterrows():
        kind = str(e.get("kind", ""))
        t = float(e["t_applied"])
        val = pd.to_numeric(pd.Series([e.get("value")]), errors="coerce").iloc[0]
        gid = str(e.get("target", ""))
        if kind == "set_rate" and not math.isnan(val):
            links[gid] = float(val)
            rate.append((t, _lowest(links, training)))
        elif kind == "cross_start":
            groups[gid] = groups.get(gid, 0.0) + (0.0 if math.isnan(val) else float(val))
            streams.append((t, sum(groups.values())))
        elif kind == "cross_stop":
            groups[gid] = 0.0
            streams.append((t, sum(groups.values())))
    rate.append((t_end, rate[-1][1]))
    streams.append((t_end, streams[-1][1]))
    return (pd.DataFrame(rate, columns=["t", "rate_mbit"]),
            pd.DataFrame(streams, columns=["t", "streams"]))


def _link_rates(topo: dict[str, Any]) -> tuple[dict[str, float], list[str] | None]:
    """(configured rate of each link, the links training crosses) of a config's topology;
    unreadable: ({"": first rate-like field}, None), every link set later counting."""
    try:
        spec = topology_registry.parse(topo)
        rates = spec.link_rates()
        return ({k: math.inf if v is None else float(v) for k, v in rates.items()},
                spec.training_links())
    except (ValueError, TypeError, NotImplementedError):  # ValidationError is a ValueError
        r0 = next((topo[k] for k in tables.RATE_KEYS if isinstance(topo.get(k), int | float)),
                  None)
        return {"": math.nan if r0 is None else float(r0)}, None


def _lowest(links: dict[str, float], training: list[str] | None) -> float:
    values = [links[k] for k in training if k in links] if training is not None \
        else list(links.values())
    finite = [v for v in values if not math.isnan(v)]
    low = min(finite) if finite else math.nan
    return math.nan if low == math.inf else low


def timeline_runs(runs: pd.DataFrame, root: Path | None = None) -> pd.DataFrame:
    r = tables.ok_runs(runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "timeline"]
    if sel.empty and root is not None:  # single runs of a dynamic scenario (star-congestion)
        dyn = r[[not read_events(root / run).dropna(subset=["t_applied"]).empty
                 for run in r["run"]]]
        sel = dyn[dyn["experiment"] == dyn["experiment"].iloc[0]] if not dyn.empty else dyn
    if sel.empty:
        sel = tta_runs(runs)
    return sel


#: Order of NetSenseML's levels on the timeline's level axis (least to most reduction);
#: levels not listed are appended in order of appearance.
LEVEL_ORDER = methods.level_order()  # the registry's display order of step-record levels


def _first_step_t(s: pd.DataFrame) -> float:
    s = tables.step_rows(s)
    return float(s["t"].min()) if not s.empty else 0.0


def read_bottleneck(run_dir: Path) -> pd.DataFrame:
    """The bottleneck sampler's queue series (bottleneck.csv) when the run recorded one."""
    try:
        df = pd.read_csv(Path(run_dir) / "bottleneck.csv")
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return pd.DataFrame()
    tcol = next((c for c in ("t", "t_s", "time") if c in df.columns), None)
    qcol = next((c for c in df.columns if any(k in c for k in ("backlog_pkts", "qlen", "queue",
                                                                "backlog"))), None)
    if tcol is None or qcol is None:
        return pd.DataFrame()
    return pd.DataFrame({"t": pd.to_numeric(df[tcol], errors="coerce"),
                         "queue": pd.to_numeric(df[qcol], errors="coerce"),
                         "label": qcol}).dropna(subset=["t", "queue"])


def _estimate_mbit(s: pd.DataFrame) -> pd.Series | None:
    """The monitor's bandwidth estimate (Mbit/s) from the step records, when logged."""
    for col, factor in (("monitor_bw_mbit", 1.0), ("est_bw_mbit", 1.0), ("model_bw_MBps", 8.0)):
        if col in s.columns and pd.to_numeric(s[col], errors="coerce").notna().any():
            return pd.to_numeric(s[col], errors="coerce") * factor
    return None


def plot_timeline(runs: pd.DataFrame, steps: pd.DataFrame, root: Path, out: Path) -> list[Path]:
    """Figure 3. Time axis: seconds since each run's first training step (rank 0).

    Worker start-up (torch import, rendezvous) varies run to run on a shared machine; the
    timeline scenarios use ``timeline_origin: first_step``, so measured from the first step
    the events of every run line up with the scenario's ``at_s`` times.
    """
    sel = timeline_runs(runs, root)
    if sel.empty:
        raise NoData("no finished run for the adaptation timeline (kind: timeline)")
    ns = sel[sel["method"] == tables.ADAPTIVE]
    ref = (ns if not ns.empty else sel).sort_values("seed").iloc[0]
    sel = sel[(sel["seed"] == ref["seed"]) & (sel["experiment"] == ref["experiment"])]
    colors = _colors(list(sel["method"].unique()))
    ref_all = steps[steps["run"] == ref["run"]]
    t0 = _first_step_t(ref_all)
    ref_steps = tables.step_rows(ref_all)
    ref_steps = ref_steps[ref_steps["rank"] == ref_steps["rank"].min()].sort_values("t")
    t_end = float(ref_steps["t"].max()) - t0
    cfg = tables._read_json(root / ref["run"] / "config.json")
    events = read_events(root / ref["run"])
    if not events.empty:
        events = events.assign(t_applied=pd.to_numeric(events["t_applied"], errors="coerce") - t0)
    rate, streams = network_series(cfg, events, t_end)
    rate["t"] = rate["t"].clip(lower=0)
    streams["t"] = streams["t"].clip(lower=0)
    queue = read_bottleneck(root / ref["run"])
    est = _estimate_mbit(ref_steps)
    constant = rate["rate_mbit"].nunique(dropna=True) <= 1

    fig, axes = plt.subplots(3, 1, figsize=(8.5, 8.4), sharex=True)
    a0 = axes[0]
    handles = []
    if not constant or est is not None:
        if not constant:
            handles += a0.step(rate["t"], rate["rate_mbit"], where="post", color="tab:blue",
                               label="configured rate")
        if est is not None:
            handles += a0.plot(ref_steps["t"] - t0, est, ls="none", marker=".", ms=3,
                               color="tab:cyan", label="monitor's bandwidth estimate")
        a0.set_ylabel("Mbit/s")
        top = float(np.nanmax(rate["rate_mbit"])) if rate["rate_mbit"].notna().any() else None
        # the estimate's outliers (a burst measured over a tiny window) must not squash the
        # configured rate: the axis ends at 1.5x the highest configured rate
        a0.set_ylim(0, top * 1.5 if top else None)
    if streams["streams"].max() > 0 or not handles:
        a0b = a0.twinx() if handles else a0
        handles += a0b.step(streams["t"], streams["streams"], where="post", color="tab:red",
                            marker="o", ms=3, label="cross-traffic streams")
        a0b.set_ylabel("iperf3 streams", color="tab:red")
        a0b.set_ylim(0, max(1.0, float(streams["streams"].max())) * 1.15)
    if not queue.empty:
        a0q = a0.twinx()
        a0q.spines["right"].set_position(("axes", 1.12))
        handles += a0q.plot(queue["t"] - t0, queue["queue"], color="tab:purple", lw=0.8,
                            drawstyle="steps-post", label=f"bottleneck queue ({queue['label'].iloc[0]})")
        a0q.set_ylabel("queue", color="tab:purple")
    base = rate["rate_mbit"].dropna()
    rate_note = (f"link rate {base.iloc[0]:g} Mbit/s throughout" if constant and len(base)
                 else "link rate changes as shown")
    a0.set_title(f"{ref['experiment']}: network as applied ({rate_note}) and "
                 f"{ref['method']}'s response", fontsize=9)
    a0.legend(handles=handles, fontsize=7, loc="upper left")

    a1 = axes[1]
    x = ref_steps["t"] - t0
    if "kept_ratio" in ref_steps.columns and ref_steps["kept_ratio"].notna().any():
        a1.plot(x, ref_steps["kept_ratio"], drawstyle="steps-post", marker=".", ms=2, lw=0.8,
                color=colors[ref["method"]], label="kept ratio")
        a1.set_yscale("log")
        _log_ticks(a1)
    a1.set_ylabel(f"{ref['method']} kept ratio (log)", color=colors[ref["method"]])
    if "level" in ref_steps.columns and ref_steps["level"].notna().any():
        a1b = a1.twinx()
        lv = ref_steps["level"]
        if not pd.api.types.is_numeric_dtype(lv):  # textual levels -> every registry level
            seen = list(dict.fromkeys(lv.dropna()))
            cats = list(LEVEL_ORDER) + [c for c in seen if c not in LEVEL_ORDER]
            a1b.set_yticks(range(len(cats)), cats, fontsize=7)
            a1b.set_ylim(-0.5, len(cats) - 0.5)
            lv = lv.map({c: i for i, c in enumerate(cats)})
        a1b.plot(x, lv, drawstyle="steps-post", color="tab:gray", ls="none", marker="|", ms=4,
                 label="level")
        a1b.set_ylabel("level (grey ticks)")

    a2 = axes[2]
    for _, r in sel.sort_values("method").iterrows():
        s_all = steps[steps["run"] == r["run"]]
        s = tables.step_rows(s_all)
        s = s[s["rank"] == s["rank"].min()].sort_values("t")
        if "step_s" not in s.columns or s.empty:
            continue
        m = r["method"]
        a2.plot(s["t"] - _first_step_t(s_all), s["step_s"], color=colors[m], label=m,
                ls="none", marker=".", ms=2.5 if m == tables.ADAPTIVE else 2, alpha=0.8)
    a2.set_yscale("log")
    _log_ticks(a2)
    a2.set_ylabel("step time (s, log)")
    a2.set_xlabel("time since the run's first training step (s)")
    a2.legend(fontsize=7, ncol=3, markerscale=3)
    applied = events.dropna(subset=["t_applied"]) if not events.empty else events
    for ax in axes:
        for t in applied.get("t_applied", []):
            ax.axvline(float(t), color="k", alpha=0.2, lw=0.8)
        ax.grid(True, alpha=0.3)
    axes[0].set_xlim(left=0)
    return _save(fig, out, "adaptation_timeline")


# ------------------------------------------------------------------ 4. speedup


def _seed_range(runs: pd.DataFrame | None, exp: str, rate: float, base: str, col: str
                ) -> tuple[float, float] | None:
    """Min and max over seeds of the per-seed speedup (runs paired by seed), or None."""
    if runs is None or runs.empty:
        return None
    r = tables.ok_runs(runs)
    r = r[(r["experiment"] == exp) & (r["rate_mbit"] == rate)]
    a = r[r["method"] == tables.ADAPTIVE].set_index("seed")
    b = r[r["method"] == base].set_index("seed")
    src = "throughput" if col == "throughput_speedup" else "tta_s"
    seeds = a.index.intersection(b.index)
    if len(seeds) < 2:
        return None
    va, vb = a.loc[seeds, src].astype(float), b.loc[seeds, src].astype(float)
    ratio = (va / vb) if src == "throughput" else (vb / va)
    ratio = ratio.replace([np.inf, -np.inf], np.nan).dropna()
    return (float(ratio.min()), float(ratio.max())) if len(ratio) >= 2 else None


def plot_speedup(sp: pd.DataFrame, out: Path, runs: pd.DataFrame | None = None) -> list[Path]:
    """Cells: mean speedup and, with two or more seeds, [min-max] of the per-seed speedups.

    One colour scale (log, symmetric around 1x) for every panel, labelled in "x"."""
    if sp.empty:
        raise NoData("no rate with both netsenseml and a baseline finished")
    exps = list(dict.fromkeys(sp["experiment"]))
    allv = sp[["throughput_speedup", "tta_speedup"]].to_numpy(dtype=float).ravel()
    allv = allv[np.isfinite(allv) & (allv > 0)]
    span = max(2.0, float(np.exp(np.abs(np.log(allv)).max())) * 1.05) if len(allv) else 2.0
    norm = matplotlib.colors.LogNorm(vmin=1 / span, vmax=span)
    fig, axes = plt.subplots(len(exps), 2, figsize=(11, 0.8 + 0.55 * sp["baseline"].nunique()
                                                     * len(exps) + 1.6 * len(exps)),
                             squeeze=False, layout="constrained")
    im = None
    for row, exp in zip(axes, exps, strict=True):
        e = sp[sp["experiment"] == exp]
        for ax, col, title in ((row[0], "throughput_speedup", "throughput speedup"),
                               (row[1], "tta_speedup", "time-to-accuracy speedup")):
            piv = e.pivot_table(index="baseline", columns="rate_mbit", values=col,
                                aggfunc="first", dropna=False)
            vals = piv.to_numpy(dtype=float)
            shown = np.where(np.isfinite(vals) & (vals > 0), vals, np.nan)
            im = ax.imshow(shown, cmap="RdYlGn", norm=norm, aspect="auto")
            ax.set_xticks(range(piv.shape[1]), [f"{c:g}" for c in piv.columns])
            ax.set_yticks(range(piv.shape[0]), list(piv.index), fontsize=8)
            for i, base in enumerate(piv.index):
                for j, rate in enumerate(piv.columns):
                    v = vals[i, j]
                    txt = f"{v:.2f}x" if np.isfinite(v) else "n/a"
                    rng = _seed_range(runs, exp, rate, base, col) if np.isfinite(v) else None
                    if rng is not None:
                        txt += f"\n[{rng[0]:.2f}-{rng[1]:.2f}]"
                    ax.text(j, i, txt, ha="center", va="center", fontsize=7)
            ax.set_xlabel("rate (Mbit/s)")
            ax.set_title(f"{exp}: NetSenseML {title}", fontsize=9)
    if im is not None:
        ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if 1 / span <= t <= span]
        cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, ticks=ticks)
        cb.ax.set_yticklabels([f"{t:g}x" for t in ticks])
        cb.set_label("speedup (one scale for all panels)")
    fig.suptitle("NetSenseML vs each baseline (>1x = NetSenseML faster; [min-max] over seeds; "
                 "n/a = target not reached by one side)", fontsize=9)
    return _save(fig, out, "speedup")


# ------------------------------------------------------------------ crossover


def crossover_tables(root: Path, runs: pd.DataFrame, steps: pd.DataFrame
                     ) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The crossover table of every static (throughput) experiment, each with the steps to
    target its sweep's convergence gives (``ideal.steps_for``); rows carry ``steps_source``."""
    from testbed.analysis import ideal

    r = tables.ok_runs(runs)
    if r.empty:
        return tables.crossover_table(r, {})
    measured = ideal.sweep_steps(runs, steps)
    parts, crossings = [], []
    for exp, g in r[r["kind"] == "throughput"].groupby("experiment", sort=True):
        n_steps, source = ideal.steps_for(root, r, g, measured)
        if not n_steps:
            continue
        t, c = tables.crossover_table(r, n_steps, experiment=exp)
        parts.append(t.assign(steps_source=source))
        crossings += c
    if not parts:
        return tables.crossover_table(r.iloc[0:0], {})
    return pd.concat(parts, ignore_index=True), crossings


def plot_crossover(table: pd.DataFrame, crossings: list[dict[str, Any]], out: Path
                   ) -> list[Path]:
    """Time to target (step time x the level's steps to target) per fixed level against the
    rate, per static experiment; the best level per rate ringed, crossovers as lines."""
    if table.empty:
        raise NoData("no static (throughput) experiment with a convergence table or with "
                     "fixed runs of its sweep that reached the target")
    exps = list(dict.fromkeys(table["experiment"]))
    fig, axes = plt.subplots(1, len(exps), figsize=(6.5 * len(exps), 4.2), squeeze=False,
                             layout="constrained")
    colors = _colors(list(table["method"].unique()))
    for ax, exp in zip(axes[0], exps, strict=True):
        e = table[table["experiment"] == exp]
        for method, g in e.groupby("method", sort=False):
            g = g.sort_values("rate_mbit")
            ax.plot(g["rate_mbit"], g["time_to_target_s"], marker="o", ms=4,
                    color=colors.get(method), label=method)
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
        ax.set_xlabel(_rate_label(e))
        ax.set_ylabel("time to target (s) = step time x steps to target")
        ax.set_title(f"{exp}: best fixed level per rate "
                     f"({e['steps_source'].iloc[0] if 'steps_source' in e else ''})", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, out, "crossover")


# ------------------------------------------------------------------ all


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    with files.atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return path


def make_figures(root: Path, out: Path | None = None, *, log: Any = print
                 ) -> dict[str, list[Path]]:
    """Draw every figure that the results support; returns {name: [paths]}.

    A figure without data is skipped with a message (through ``log``) rather than drawn empty.
    Raises NoData if there are no run folders at all.
    """
    root = Path(root)
    out = Path(out) if out else root / "figures"
    runs, steps = tables.load_runs(root)
    excluded = loading.excluded_of(runs)
    for e in excluded:  # damaged folders: named, never silently dropped
        log(f"excluded damaged run {e.run}: {e.reason}")
    if not runs.empty:
        for _, r in runs[runs["status"] != "ok"].iterrows():
            log(f"not plotted: {r['run']} is {r['status']}"
                + (f" ({str(r['reason'])[:160]})" if r.get("reason") else ""))
    if runs.empty:
        raise NoData(f"no loadable run folders under {root} ({len(excluded)} damaged, "
                     "listed above)" if excluded else f"no run folders under {root}")
    out.mkdir(parents=True, exist_ok=True)
    _NOTE["text"] = loading.exclusion_note(excluded)
    written: dict[str, list[Path]] = {}
    from testbed.analysis import ideal

    ideal_runs = ideal.ideal_table(root, runs, steps)
    sp = tables.speedup_table(runs, ideal_runs)
    for where, why in sp.attrs.get("left_out", {}).items():
        log(f"not in speedup.csv: {where}: {why}")
    xt, crossings = crossover_tables(root, runs, steps)
    for c in crossings:
        log(f"crossover {c['experiment']}: {c['below']} below ~{c['crossover_mbit']:.0f} "
            f"Mbit/s, {c['above']} above (best changes between {c['between'][0]:g} and "
            f"{c['between'][1]:g} Mbit/s)")
    written["tables"] = [
        write_csv(runs, out / "runs.csv"),
        write_csv(tables.throughput_table(runs), out / "throughput.csv"),
        write_csv(tables.tta_table(runs), out / "tta.csv"),
        write_csv(sp, out / "speedup.csv"),
        write_csv(timelines.timeline_table(root, runs, steps), out / "timeline.csv"),
        write_csv(ideal_runs, out / "ideal.csv"),
        write_csv(xt, out / "crossover.csv"),
        write_csv(tables.ideal_vs_fixed(sp), out / "ideal_vs_fixed.csv"),
    ]
    jobs = {
        "throughput_vs_rate": lambda: plot_throughput(runs, out, steps, root),
        "accuracy_vs_time": lambda: plot_accuracy(runs, steps, out),
        "adaptation_timeline": lambda: plot_timeline(runs, steps, root, out),
        "speedup": lambda: plot_speedup(sp, out, runs),
        "crossover": lambda: plot_crossover(xt, crossings, out),
    }
    try:
        for name, job in jobs.items():
            try:
                written[name] = job()
            except NoData as exc:
                log(f"skipped {name}: {exc}")
    finally:
        _NOTE["text"] = ""
    return written
