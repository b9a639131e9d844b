"""The per-step timeline of the dynamic runs as one small CSV, so figures can be redrawn
without re-running (``results/figures/timeline.csv``).

Why a flat file: the adaptation figure needs, per step, what the network was doing (the
configured rate, the competing iperf3 streams, both *as applied*, from events.csv) next to
what each method did (level, kept ratio, step time). Joining steps.csv and events.csv of
every run is the tedious part; this module does it once.

One row per rank-0 training step of every ok run of kind ``timeline`` (one run per seed,
:func:`tables.ok_runs`). Columns:

- ``experiment``, ``method``, ``seed`` (one run each: :func:`tables.ok_runs`);
- ``t_s``: the worker's training clock (``t_worker``, 0 at the start of the first training
  step: the clock time to accuracy is counted on) at the end of the step;
- ``step``, ``level``, ``kept_ratio``, ``step_s``, ``comm_s``;
- ``rate_mbit``: the configured bottleneck rate at that moment, ``streams``: competing iperf3
  streams at that moment (figures.network.network_series, events shifted onto the training clock by
  the run's own offset between its launch clock ``t`` and ``t_worker``);
- ``accuracy``: the held-out accuracy when the step was followed by an evaluation, else empty.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed.analysis import loading, tables
from testbed.analysis.figures import network

COLUMNS = ["experiment", "method", "seed", "t_s", "step", "level", "kept_ratio",
           "step_s", "comm_s", "rate_mbit", "streams", "accuracy"]


def _at(series: pd.DataFrame, col: str, t: np.ndarray) -> np.ndarray:
    """Value of a step series (t, col; 'post' steps) at times t."""
    s = series.sort_values("t", kind="stable")
    idx = np.searchsorted(s["t"].to_numpy(dtype=float), t, side="right") - 1
    vals = s[col].to_numpy(dtype=float)
    return np.where(idx >= 0, vals[np.clip(idx, 0, len(vals) - 1)], vals[0])


def run_timeline(folders: loading.Folders | Path, run: pd.Series, steps: pd.DataFrame
                 ) -> pd.DataFrame:
    """The rows of one run (see the module doc); empty when it has no step rows."""
    s = tables.training_step_rows(steps)
    if s.empty or "t_worker" not in s.columns:
        return pd.DataFrame(columns=COLUMNS)
    s = s[s["rank"] == s["rank"].min()].sort_values("t_worker")
    offset = float((s["t"] - s["t_worker"]).median())  # launch clock - training clock
    folder = loading.folders_of(folders)[run["run"]]
    events = network.read_events(folder)
    if not events.empty:
        events = events.assign(
            t_applied=pd.to_numeric(events["t_applied"], errors="coerce") - offset)
    cfg = folder.config
    t = s["t_worker"].to_numpy(dtype=float)
    rate, streams = network.network_series(cfg, events, float(t.max()) if len(t) else 0.0)
    acc = steps.dropna(subset=["accuracy"]) if "accuracy" in steps.columns else steps.iloc[0:0]
    acc = acc[acc["rank"] == s["rank"].min()].set_index("step")["accuracy"] \
        if not acc.empty else pd.Series(dtype=float)
    out = pd.DataFrame({
        "experiment": run["experiment"], "method": run["method"], "seed": run["seed"],
        "t_s": t.round(3), "step": s["step"].to_numpy(),
        "level": s["level"].to_numpy() if "level" in s.columns else "none",
        "kept_ratio": s["kept_ratio"].to_numpy() if "kept_ratio" in s.columns else 1.0,
        "step_s": s["step_s"].to_numpy() if "step_s" in s.columns else np.nan,
        "comm_s": s["comm_s"].to_numpy() if "comm_s" in s.columns else np.nan,
        "rate_mbit": _at(rate, "rate_mbit", t), "streams": _at(streams, "streams", t),
    })
    out["accuracy"] = out["step"].map(acc[~acc.index.duplicated()]) if len(acc) else np.nan
    # milliseconds and 4 significant digits: what a figure needs, a file a few MB smaller
    for col in ("step_s", "comm_s"):
        out[col] = pd.to_numeric(out[col], errors="coerce").round(4)
    out["kept_ratio"] = pd.to_numeric(out["kept_ratio"], errors="coerce").map(
        lambda v: float(f"{v:.4g}") if pd.notna(v) else v)
    return out[COLUMNS]


def timeline_table(folders: loading.Folders | Path, runs: pd.DataFrame, steps: pd.DataFrame,
                   kinds: tuple[str, ...] | None = ("timeline",)) -> pd.DataFrame:
    """Every ok run's rows (of kind ``timeline``, or of every kind with ``kinds=None``: the
    runs the caller picked), by experiment, method, seed and time."""
    r = tables.ok_runs(runs)
    r = r[r["kind"].isin(kinds)] if kinds is not None and not r.empty else r
    if r.empty or steps.empty:
        return pd.DataFrame(columns=COLUMNS)
    folders = loading.folders_of(folders)
    parts = [run_timeline(folders, row, steps[steps["run"] == row["run"]])
             for _, row in r.iterrows()]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["experiment", "method", "seed", "t_s"]).reset_index(drop=True)
