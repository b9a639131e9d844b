"""The paper's figures, drawn with matplotlib (Agg) from run folders only.

Every number drawn here comes from testbed.analysis.tables (config.json / summary.json / steps.csv /
events.csv / sweep.json); nothing is typed in. ``make_figures`` writes PNG + PDF of:

1. ``throughput_vs_rate``   samples/s vs bottleneck rate (log-log), one line per method, error
   bars = std over seeds; runs of experiments of kind ``throughput`` (else any experiment
   with two or more rates).
2. ``accuracy_vs_time``     test accuracy (LM loss when no accuracy was recorded) vs wall-clock
   seconds per method at the constrained rate, the target as a dashed line and each run's
   time to target marked; runs of kind ``tta``, else the lowest rate of the throughput runs.
3. ``adaptation_timeline``  configured rate and cross-traffic streams (from events.csv as
   applied), NetSenseML's kept ratio and level, and step time of every method, with applied
   events as vertical lines; runs of kind ``timeline``, else NetSenseML at the lowest rate.
4. ``speedup``              speedup.csv as annotated heatmaps (throughput and time-to-accuracy
   speedup of NetSenseML over each baseline at each rate).

Also writes the tables as CSV (runs.csv, throughput.csv, tta.csv, speedup.csv).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from netsenseml import methods  # noqa: E402
from testbed.analysis import loading, tables  # noqa: E402
from testbed.common import files  # noqa: E402
from topologies import registry as topology_registry  # noqa: E402

FIGURES = ("throughput_vs_rate", "accuracy_vs_time", "adaptation_timeline", "speedup")


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


def plot_throughput(runs: pd.DataFrame, out: Path) -> list[Path]:
    sel = throughput_runs(runs)
    if sel.empty:
        raise NoData("no finished runs at two or more rates (kind: throughput)")
    tab = tables.throughput_table(sel)
    exps = list(dict.fromkeys(tab["experiment"]))
    colors = _colors(list(tab["method"].unique()))
    fig, axes = plt.subplots(1, len(exps), figsize=(5.5 * len(exps), 4.2), squeeze=False)
    for ax, exp in zip(axes[0], exps, strict=True):
        t = tab[tab["experiment"] == exp]
        for m, g in t.groupby("method"):
            g = g.sort_values("rate_mbit")
            ax.errorbar(g["rate_mbit"], g["throughput_mean"], yerr=g["throughput_std"].fillna(0),
                        marker="o", ms=4, capsize=3, label=m, color=colors[m],
                        lw=2.2 if m == tables.ADAPTIVE else 1.3)
        # log-log: rates span two decades and throughput an order of magnitude or more
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted(t["rate_mbit"].dropna().unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(_rate_label(sel))
        ax.set_ylabel("training throughput (samples/s, log)")
        seeds = int(t["seeds"].max())
        ax.set_title(f"{exp}  (mean ± std over {seeds} seeds)" if seeds > 1
                     else f"{exp}  (1 seed)")
        ax.grid(True, which="both", alpha=0.3)
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
        if not thr.empty:
            exp = thr["experiment"].iloc[0]
            e = thr[thr["experiment"] == exp]
            sel = e[e["rate_mbit"] == e["rate_mbit"].min()]
    return sel


def plot_accuracy(runs: pd.DataFrame, steps: pd.DataFrame, out: Path) -> list[Path]:
    sel = tta_runs(runs)
    if sel.empty:
        raise NoData("no finished runs for accuracy vs time (kind: tta)")
    colors = _colors(list(sel["method"].unique()))
    use_acc = "accuracy" in steps.columns and steps[steps["run"].isin(sel["run"])][
        "accuracy"].notna().any()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    seen: set[str] = set()
    target = sel["target_accuracy"].dropna()
    for _, r in sel.sort_values(["method", "seed"]).iterrows():
        s = steps[steps["run"] == r["run"]]
        tc = tables.train_clock(s)
        if use_acc:
            cur = tables._evals(s)
            y = "accuracy"
        else:  # LM: training loss of rank 0, smoothed over 5 steps
            cur = tables.step_rows(s)
            cur = cur[cur["rank"] == cur["rank"].min()].sort_values(tc)
            cur = cur.assign(loss=cur["loss"].rolling(5, min_periods=1).mean())
            y = "loss"
        if cur.empty:
            continue
        m = r["method"]
        ax.plot(cur[tc], cur[y], color=colors[m], lw=2.2 if m == tables.ADAPTIVE else 1.2,
                label=None if m in seen else m, marker="." if use_acc else None)
        seen.add(m)
        if use_acc and not math.isnan(r["tta_s"]):
            hit = cur[cur[tc] == r["tta_s"]]
            ax.plot([r["tta_s"]], [hit[y].iloc[0] if not hit.empty else target.iloc[0]],
                    marker="*", ms=13, color=colors[m], mec="k", zorder=5)
            ax.axvline(r["tta_s"], color=colors[m], ls=":", lw=1)
    if use_acc and not target.empty:
        ax.axhline(target.iloc[0], color="k", ls="--", lw=1,
                   label=f"target {target.iloc[0]:.2f} (★ = time to target)")
    rates = sorted(sel["rate_mbit"].dropna().unique())
    rate_s = ", ".join(f"{x:g}" for x in rates) if rates else "?"
    ax.set_title(f"{sel['experiment'].iloc[0]} at {rate_s} Mbit/s")
    ax.set_xlabel("wall-clock time since the worker started (s)")
    ax.set_ylabel("test accuracy" if use_acc else "training loss (LM, 5-step mean)")
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


def timeline_runs(runs: pd.DataFrame) -> pd.DataFrame:
    r = tables.ok_runs(runs)
    if r.empty:
        return r
    sel = r[r["kind"] == "timeline"]
    if sel.empty:
        low = tta_runs(runs)
        sel = low[low["seed"] == low["seed"].min()] if not low.empty else low
    return sel


#: Order of NetSenseML's levels on the timeline's level axis (least to most reduction);
#: levels not listed are appended in order of appearance.
LEVEL_ORDER = methods.level_order()  # the registry's display order of step-record levels


def _first_step_t(s: pd.DataFrame) -> float:
    s = tables.step_rows(s)
    return float(s["t"].min()) if not s.empty else 0.0


def plot_timeline(runs: pd.DataFrame, steps: pd.DataFrame, root: Path, out: Path) -> list[Path]:
    """Figure 3. Time axis: seconds since each run's first training step (rank 0).

    Worker start-up (torch import, rendezvous) varies run to run on a shared machine; the
    timeline scenarios use ``timeline_origin: first_step``, so measured from the first step
    the events of every run line up with the scenario's ``at`` times.
    """
    sel = timeline_runs(runs)
    ns = sel[sel["method"] == tables.ADAPTIVE] if not sel.empty else sel
    if ns.empty:
        raise NoData("no finished netsenseml run for the adaptation timeline (kind: timeline)")
    ns_row = ns.sort_values("seed").iloc[0]
    sel = sel[(sel["seed"] == ns_row["seed"]) & (sel["experiment"] == ns_row["experiment"])]
    colors = _colors(list(sel["method"].unique()))
    ns_all = steps[steps["run"] == ns_row["run"]]
    t0 = _first_step_t(ns_all)
    ns_steps = tables.step_rows(ns_all)
    ns_steps = ns_steps[ns_steps["rank"] == ns_steps["rank"].min()].sort_values("t")
    t_end = float(ns_steps["t"].max()) - t0
    cfg = tables._read_json(root / ns_row["run"] / "config.json")
    events = read_events(root / ns_row["run"])
    if not events.empty:
        events = events.assign(t_applied=pd.to_numeric(events["t_applied"], errors="coerce") - t0)
    rate, streams = network_series(cfg, events, t_end)
    rate["t"] = rate["t"].clip(lower=0)
    streams["t"] = streams["t"].clip(lower=0)

    fig, axes = plt.subplots(3, 1, figsize=(8.5, 8), sharex=True)
    a0 = axes[0]
    a0.step(rate["t"], rate["rate_mbit"], where="post", color="tab:blue", label="configured rate")
    a0.set_ylabel("configured rate (Mbit/s)", color="tab:blue")
    top = float(np.nanmax(rate["rate_mbit"])) if rate["rate_mbit"].notna().any() else 1.0
    a0.set_ylim(0, top * 1.15)
    a0b = a0.twinx()
    a0b.step(streams["t"], streams["streams"], where="post", color="tab:red",
             label="cross-traffic streams")
    a0b.set_ylabel("iperf3 streams", color="tab:red")
    a0b.set_ylim(0, max(1.0, float(streams["streams"].max())) * 1.15)
    a0.set_title(f"{ns_row['experiment']}: network (as applied) and NetSenseML's response")

    a1 = axes[1]
    x = ns_steps["t"] - t0
    if "kept_ratio" in ns_steps.columns:
        a1.step(x, ns_steps["kept_ratio"], where="post", color=colors[tables.ADAPTIVE],
                label="kept ratio")
        a1.set_yscale("log")
    a1.set_ylabel("NetSenseML kept ratio (log)", color=colors[tables.ADAPTIVE])
    if "level" in ns_steps.columns:
        a1b = a1.twinx()
        lv = ns_steps["level"]
        if not pd.api.types.is_numeric_dtype(lv):  # textual levels -> ordinal codes on the axis
            seen = list(dict.fromkeys(lv.dropna()))
            cats = [c for c in LEVEL_ORDER if c in seen] + [c for c in seen if c not in LEVEL_ORDER]
            a1b.set_yticks(range(len(cats)), cats, fontsize=7)
            a1b.set_ylim(-0.3, len(cats) - 0.7)
            lv = lv.map({c: i for i, c in enumerate(cats)})
        a1b.step(x, lv, where="post", color="tab:gray", ls="--", lw=1, label="level")
        a1b.set_ylabel("level (dashed)")

    a2 = axes[2]
    for _, r in sel.sort_values("method").iterrows():
        s_all = steps[steps["run"] == r["run"]]
        s = tables.step_rows(s_all)
        s = s[s["rank"] == s["rank"].min()].sort_values("t")
        if "step_s" not in s.columns or s.empty:
            continue
        m = r["method"]
        a2.plot(s["t"] - _first_step_t(s_all), s["step_s"].rolling(5, min_periods=1).median(),
                color=colors[m], label=m, lw=2 if m == tables.ADAPTIVE else 1.1)
    a2.set_yscale("log")
    a2.set_ylabel("step time (s, 5-step median)")
    a2.set_xlabel("time since the run's first training step (s)")
    a2.legend(fontsize=7, ncol=3)
    applied = events.dropna(subset=["t_applied"]) if not events.empty else events
    for ax in axes:
        for t in applied.get("t_applied", []):
            ax.axvline(float(t), color="k", alpha=0.25, lw=0.8)
        ax.grid(True, alpha=0.3)
    axes[0].set_xlim(left=0)
    return _save(fig, out, "adaptation_timeline")


# ------------------------------------------------------------------ 4. speedup


def plot_speedup(sp: pd.DataFrame, out: Path) -> list[Path]:
    if sp.empty:
        raise NoData("no rate with both netsenseml and a baseline finished")
    exps = list(dict.fromkeys(sp["experiment"]))
    fig, axes = plt.subplots(len(exps), 2, figsize=(11, 0.6 + 0.45 * sp["baseline"].nunique()
                                                     * len(exps) + 1.6 * len(exps)),
                             squeeze=False)
    for row, exp in zip(axes, exps, strict=True):
        e = sp[sp["experiment"] == exp]
        for ax, col, title in ((row[0], "throughput_speedup", "throughput speedup"),
                               (row[1], "tta_speedup", "time-to-accuracy speedup")):
            piv = e.pivot_table(index="baseline", columns="rate_mbit", values=col,
                                aggfunc="first", dropna=False)
            vals = piv.to_numpy(dtype=float)
            ok = np.isfinite(vals) & (vals > 0)
            logv = np.log10(np.where(ok, vals, np.nan))
            span = max(0.5, float(np.nanmax(np.abs(logv))) * 1.05) if ok.any() else 1.0
            im = ax.imshow(logv, cmap="RdYlGn", vmin=-span, vmax=span, aspect="auto")
            ax.set_xticks(range(piv.shape[1]), [f"{c:g}" for c in piv.columns])
            ax.set_yticks(range(piv.shape[0]), list(piv.index), fontsize=8)
            for i in range(piv.shape[0]):
                for j in range(piv.shape[1]):
                    v = vals[i, j]
                    ax.text(j, i, f"{v:.2f}x" if np.isfinite(v) else "n/a", ha="center",
                            va="center", fontsize=8)
            ax.set_xlabel("rate (Mbit/s)")
            ax.set_title(f"{exp}: NetSenseML {title}", fontsize=9)
            fig.colorbar(im, ax=ax, label="log10 speedup", shrink=0.8)
    fig.suptitle("NetSenseML vs each baseline (>1 = NetSenseML faster; n/a = target not "
                 "reached by one side)", fontsize=9, y=1.0)
    fig.tight_layout()
    return _save(fig, out, "speedup")


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
    sp = tables.speedup_table(runs)
    written["tables"] = [
        write_csv(runs, out / "runs.csv"),
        write_csv(tables.throughput_table(runs), out / "throughput.csv"),
        write_csv(tables.tta_table(runs), out / "tta.csv"),
        write_csv(sp, out / "speedup.csv"),
    ]
    jobs = {
        "throughput_vs_rate": lambda: plot_throughput(runs, out),
        "accuracy_vs_time": lambda: plot_accuracy(runs, steps, out),
        "adaptation_timeline": lambda: plot_timeline(runs, steps, root, out),
        "speedup": lambda: plot_speedup(sp, out),
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
