"""pandas tables built only from run folders (config.json, summary.json, steps.csv, sweep.json).

Why the tables recompute throughput and time-to-accuracy from steps.csv instead of trusting
summary.json: the figures must show *one* definition, stated here, that anyone can check
against the raw per-step records (tests do exactly that). summary.json's numbers are kept
beside them (``*_summary`` columns) for comparison.

Definitions (per run):

- **throughput** (samples/s): rows carry the *global* samples of the step (batch x world
  size), so rank 0's rows alone count everything. The samples of every step after rank 0's
  first one, divided by the time from the end of that first step to the end of its last:
  ``sum(samples[1:]) / (t_last - t_0)``. The first step is left out because it holds the
  rendezvous and DDP bucket set-up, not steady-state training. (Same definition as the
  orchestrator's summary.json, so the two agree to rounding; NaN with fewer than 2 steps.)
- **time to accuracy** (s) = the training-clock time (``t_worker``: seconds since the worker
  started, so python/torch start-up noise is not counted) of rank 0's earliest row whose
  ``accuracy`` is at least the target; NaN when never reached. The target comes from the
  run's config.json (first key named ``target_accuracy`` found in it).
- **final accuracy** = accuracy of the last evaluated row (largest t); final loss likewise.

Seeds: every statistic counts each (experiment, rate, grid values, method, seed) once, with
its latest finished run (``latest_per_seed``): ``netsense run`` adds a folder each time it
is repeated, and a repeat is not a new seed.

Speedup (the paper's 1.55x-9.84x form), for each experiment, rate and baseline method:
``throughput_speedup = mean thr(netsenseml) / mean thr(baseline)`` and
``tta_speedup = mean TTA(baseline) / mean TTA(netsenseml)``; tta_speedup is NaN when either
side never reached the target in any seed (an unreached target has no time to compare).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis import loading
from testbed.common import files
from topologies import registry as topology_registry

ADAPTIVE = "netsenseml"
SPEEDUP_KINDS = ("throughput", "tta")
RATE_KEYS = ("rate_mbit", "bottleneck_mbit", "bandwidth_mbit", "rate")


def _read_json(p: Path) -> dict[str, Any]:
    return files.read_json(p) or {}


find_run_dirs = loading.find_run_dirs


def find_key(obj: Any, key: str) -> Any:
    """Depth-first search for the first value stored under ``key`` in nested dicts/lists."""
    if isinstance(obj, dict):
        if key in obj and obj[key] is not None:
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def read_steps(run_dir: Path) -> pd.DataFrame:
    p = Path(run_dir) / "steps.csv"
    try:
        df = pd.read_csv(p)
    except (OSError, pd.errors.EmptyDataError):
        return pd.DataFrame()
    return df


def run_throughput(steps: pd.DataFrame) -> float:
    """Global samples/s from rank 0's rows, its first step excluded (module doc)."""
    if steps.empty or not {"rank", "t", "samples"} <= set(steps.columns):
        return math.nan
    s = step_rows(steps)
    g = s[s["rank"] == s["rank"].min()].sort_values("t")
    if len(g) < 2:
        return math.nan
    dt = float(g["t"].iloc[-1] - g["t"].iloc[0])
    return float(g["samples"].iloc[1:].sum()) / dt if dt > 0 else math.nan


def _rank0_steps(steps: pd.DataFrame) -> int:
    """Training steps run (rank 0's step rows; all ranks run the same number)."""
    if steps.empty or "rank" not in steps.columns:
        return 0
    s = step_rows(steps)
    return int((s["rank"] == s["rank"].min()).sum()) if not s.empty else 0


def step_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """Training-step rows only (eval rows, if steps.csv interleaves them, have no samples)."""
    s = steps.dropna(subset=["t", "samples"])
    if "kind" in s.columns:
        s = s[s["kind"].fillna("step") == "step"]
    return s


def train_clock(steps: pd.DataFrame) -> str:
    """Column holding the workers' training clock: ``t_worker`` when recorded, else ``t``."""
    return "t_worker" if "t_worker" in steps.columns and steps["t_worker"].notna().any() else "t"


def _evals(steps: pd.DataFrame) -> pd.DataFrame:
    """Rank 0's evaluated rows in time order (every rank logs the same global accuracy)."""
    if steps.empty or "accuracy" not in steps.columns:
        return pd.DataFrame(columns=["t", "accuracy"])
    ev = steps.dropna(subset=["accuracy"])
    if "rank" in ev.columns and not ev.empty:
        ev = ev[ev["rank"] == ev["rank"].min()]
    return ev.sort_values(train_clock(steps))


def run_tta(steps: pd.DataFrame, target: float | None) -> float:
    ev = _evals(steps)
    if target is None or ev.empty:
        return math.nan
    hit = ev[ev["accuracy"] >= target]
    return float(hit[train_clock(steps)].iloc[0]) if not hit.empty else math.nan


def _rate_of(params: dict[str, Any], config: dict[str, Any]) -> float:
    """The run's nominal rate: what its topology declares (``topologies.registry``: the
    lowest configured rate over the links training crosses), else the first rate-like key
    (runs whose topology kind can no longer be read)."""
    topo = (config.get("scenario") or {}).get("topology")
    rate = topology_registry.rate_of(topo) if isinstance(topo, dict) else None
    if rate is not None:
        return float(rate)
    for k in RATE_KEYS:
        if k in params:
            return float(params[k])
    for k in RATE_KEYS[:3]:
        v = find_key(config, k)
        if isinstance(v, int | float):
            return float(v)
    return math.nan


def load_runs(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, steps): one row per run folder, and all steps.csv rows with a ``run`` column.

    ``run`` is the folder relative to ``root``; sweep.json (written by the sweep) supplies
    experiment/kind/params, else the scenario name stands in for the experiment. Folders
    are read by ``testbed.analysis.loading``: damaged ones are left out and listed in
    ``runs.attrs["excluded"]`` (``loading.excluded_of``); ``status`` is the true one (a
    dead orchestrator's ``running`` reads ``failed``) and ``reason`` says why not ok.
    """
    root = Path(root)
    rows, frames = [], []
    loaded = loading.load_all(root)
    for item in loaded.runs:
        d, cfg, summ, meta, steps = item.path, item.config, item.summary, item.meta, item.steps
        rel = item.run
        params = meta.get("params") or {}
        target = find_key(cfg, "target_accuracy")
        target = float(target) if isinstance(target, int | float) else None
        ev = _evals(steps)
        row: dict[str, Any] = {
            "run": rel,
            "sweep": meta.get("sweep", ""),
            # "<sweep>/<experiment>": two sweeps may both have an experiment called "rate"
            "experiment": f"{meta['sweep']}/{meta['experiment']}"
            if meta.get("sweep") and meta.get("experiment") else
            (cfg.get("scenario") or {}).get("name") or d.parent.name,
            "kind": meta.get("kind", "other"),
            "method": summ.get("method") or cfg.get("method") or meta.get("method", ""),
            "seed": cfg.get("seed", meta.get("seed")),
            "status": item.status,
            "reason": item.reason,
            "rate_mbit": _rate_of(params, cfg),
            "throughput": run_throughput(steps),
            "throughput_summary": summ.get("throughput_samples_per_s"),
            "target_accuracy": target,
            "tta_s": run_tta(steps, target),
            "tta_s_summary": summ.get("time_to_accuracy_s"),
            "final_accuracy": float(ev["accuracy"].iloc[-1]) if not ev.empty else math.nan,
            "final_loss": float(ev["loss"].iloc[-1])
            if not ev.empty and "loss" in ev.columns else math.nan,
            "steps": _rank0_steps(steps),
            "started_at": cfg.get("started_at") or "",
            "bytes_sent_total": summ.get("bytes_sent_total"),
        }
        row["reached_target"] = not math.isnan(row["tta_s"])
        for k, v in params.items():
            row.setdefault(f"param.{k}", v)
        rows.append(row)
        if not steps.empty:
            frames.append(steps.assign(run=rel))
    runs = pd.DataFrame(rows)
    runs.attrs["excluded"] = loaded.excluded
    steps_all = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    for col in ("throughput_summary", "tta_s_summary", "bytes_sent_total"):
        if col in runs.columns:
            runs[col] = pd.to_numeric(runs[col], errors="coerce")
    return runs, steps_all


def ok_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Finished runs, one per seed: see ``latest_per_seed``."""
    return latest_per_seed(runs[runs["status"] == "ok"]) if not runs.empty else runs


def seed_key(runs: pd.DataFrame) -> list[str]:
    """Columns that make two runs "the same seed of the same condition"."""
    return ["experiment", "rate_mbit", "method", "seed",
            *sorted(c for c in runs.columns if c.startswith("param."))]


def latest_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """The latest run (config.json's started_at, then folder name) of each seed.

    ``netsense run`` adds a folder every time; counting a repeated seed twice would shrink
    the intervals with no new information. Older repeats stay on disk and in runs.csv.
    """
    if runs.empty or "seed" not in runs.columns:
        return runs
    order = runs.sort_values(["started_at", "run"] if "started_at" in runs.columns else ["run"])
    return order.drop_duplicates(subset=seed_key(runs), keep="last").sort_index()


def repeated_runs(runs: pd.DataFrame) -> int:
    """How many finished runs ``latest_per_seed`` leaves out (repeats of a seed)."""
    r = runs[runs["status"] == "ok"] if not runs.empty else runs
    return len(r) - len(latest_per_seed(r))


def throughput_table(runs: pd.DataFrame, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Mean/std/count of throughput over seeds per (experiment, rate, method)."""
    r = ok_runs(runs)
    if kinds is not None and not r.empty:
        r = r[r["kind"].isin(kinds)]
    cols = ["experiment", "rate_mbit", "method", "throughput_mean", "throughput_std", "seeds"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    g = r.groupby(["experiment", "rate_mbit", "method"], dropna=False)["throughput"]
    t = g.agg(throughput_mean="mean", throughput_std="std", seeds="count").reset_index()
    return t.sort_values(["experiment", "rate_mbit", "method"]).reset_index(drop=True)[cols]


def tta_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (experiment, rate, method): target, runs reaching it, mean TTA, final accuracy."""
    r = ok_runs(runs)
    cols = ["experiment", "rate_mbit", "method", "target_accuracy", "reached", "seeds",
            "tta_mean_s", "final_accuracy_mean", "final_loss_mean"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    g = r.groupby(["experiment", "rate_mbit", "method"], dropna=False)
    t = g.agg(target_accuracy=("target_accuracy", "first"), reached=("reached_target", "sum"),
              seeds=("run", "count"), tta_mean_s=("tta_s", "mean"),
              final_accuracy_mean=("final_accuracy", "mean"),
              final_loss_mean=("final_loss", "mean")).reset_index()
    return t.sort_values(["experiment", "rate_mbit", "method"]).reset_index(drop=True)[cols]


def speedup_table(runs: pd.DataFrame) -> pd.DataFrame:
    """NetSenseML relative to every other method, per experiment and rate (see module doc).

    Only experiments of kind throughput/tta count when there are any (a congestion-ramp run
    is a different condition, and stray single runs in the results folder are not a sweep).
    """
    r = ok_runs(runs)
    if not r.empty and r["kind"].isin(SPEEDUP_KINDS).any():
        r = r[r["kind"].isin(SPEEDUP_KINDS)]
    cols = ["experiment", "rate_mbit", "baseline", "throughput_speedup", "tta_speedup",
            "netsenseml_throughput", "baseline_throughput", "netsenseml_tta_s", "baseline_tta_s",
            "netsenseml_reached", "baseline_reached", "netsenseml_final_accuracy",
            "baseline_final_accuracy"]
    out: list[dict[str, Any]] = []
    if r.empty:
        return pd.DataFrame(columns=cols)
    for (exp, rate), g in r.groupby(["experiment", "rate_mbit"], dropna=False, sort=True):
        ns = g[g["method"] == ADAPTIVE]
        if ns.empty:
            continue
        ns_thr = ns["throughput"].mean()
        ns_tta = ns["tta_s"].mean() if ns["reached_target"].all() else math.nan
        for base, b in g[g["method"] != ADAPTIVE].groupby("method", sort=True):
            b_thr = b["throughput"].mean()
            b_tta = b["tta_s"].mean() if b["reached_target"].all() else math.nan
            out.append({
                "experiment": exp, "rate_mbit": rate, "baseline": base,
                "throughput_speedup": ns_thr / b_thr if b_thr > 0 else math.nan,
                "tta_speedup": b_tta / ns_tta if ns_tta > 0 else math.nan,
                "netsenseml_throughput": ns_thr, "baseline_throughput": b_thr,
                "netsenseml_tta_s": ns_tta, "baseline_tta_s": b_tta,
                "netsenseml_reached": bool(ns["reached_target"].all()),
                "baseline_reached": bool(b["reached_target"].all()),
                "netsenseml_final_accuracy": ns["final_accuracy"].mean(),
                "baseline_final_accuracy": b["final_accuracy"].mean(),
            })
    return pd.DataFrame(out, columns=cols)


def speedup_range(sp: pd.DataFrame, col: str = "throughput_speedup") -> tuple[float, float]:
    v = sp[col].replace([np.inf, -np.inf], np.nan).dropna() if not sp.empty else sp
    return (float(v.min()), float(v.max())) if len(v) else (math.nan, math.nan)
