"""The hindsight-ideal schedule: the bar an adaptive method is measured against, beside the
oracle (the best *fixed* method).

Why a second bar: the oracle only says how close an adaptive method comes to the best
single choice. Where the network crosses a workload's crossover, the best *schedule*
switches levels with the network, and nothing fixed can reach it; how far NetSenseML is
from that schedule is what is left to gain by adapting better.

Definition, per timeline experiment and seed, from the fixed ladder levels' runs of that
experiment and seed (the same network schedule, replayed for each of them):

1. **Phases**: the schedule cut at every change of the network (configured rate of the
   links training crosses, competing iperf3 streams; ``figures.network.network_series`` from each
   run's events.csv as applied, moved onto the worker's training clock). Changes closer than
   ``MERGE_S`` (a rate drop and a stream start at the same ``at``) are one boundary.
2. **Measured rate**: for each level, phase ``k`` and seed, the steps rank 0 finished in
   the phase divided by the phase's length in that run (the last phase: up to the run's
   last step). This is the level's measured step time there (evaluation pauses included, as
   in every TTA), not a model.
3. **Cost in steps**: the level's steps to the target, ``N_L``: from the workload's
   convergence table (``netsense convergence``: mean over its seeds, an unreached seed counted
   as ``max_steps``) when the experiment's scenario (or another of its sweep with as many
   workers) names one measured with as many workers, else the mean over seeds of the steps at which the sweep's fixed
   runs with as many workers first reached the target (:func:`steps_for`).
4. **The schedule**: in each phase the level with the highest progress rate
   ``rate_L,k / N_L`` (the fewest seconds per unit of progress, so a fast level that costs
   many steps can lose to a slower one that costs few); progress accumulates phase by phase
   from the first training step; the ideal TTA is the time at which it reaches 1. A phase
   in which a level's run had already ended (it reached the target and stopped) is judged
   among the levels that have data there (``levels_missing`` counts such phases).

Only fixed ladder levels (``netsenseml.methods`` ``ladder``, by method name) are candidates:
the ideal is a schedule NetSenseML's ladder could follow. Its TTA is a model built from
measured rates and measured step costs; NetSenseML's TTA is measured. Mixing levels is
assumed to add progress linearly, the premise of the policy itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis import loading, tables
from testbed.analysis.figures import network
from testbed.analysis.loading import Folders
from testbed.common import files
from testbed.common.stats import ratio_ci95

IDEAL = "ideal"
MERGE_S = 0.25
COLUMNS = ["experiment", "seed", "ideal_tta_s", "schedule", "phases_used", "levels",
           "levels_missing", "steps_source"]


level_of = tables.level_of
is_ladder = tables.is_ladder


def convergence_steps(table: dict[str, Any] | None) -> dict[str, float]:
    """{level: mean steps to target} of a ``netsense-convergence/1`` table (unreached seeds
    counted as ``max_steps``), or of a plain {level: steps} mapping; {} for None."""
    if not table:
        return {}
    levels = table.get("levels", table)
    cap = float(table.get("max_steps") or math.nan)
    out: dict[str, float] = {}
    for level, entry in levels.items():
        if isinstance(entry, int | float):
            out[level] = float(entry)
            continue
        steps = [cap if s is None else float(s) for s in (entry or {}).get("steps", [])]
        steps = [s for s in steps if not math.isnan(s)]
        if steps:
            out[level] = float(np.mean(steps))
    return out


def steps_to_target(steps: pd.DataFrame, target: float | None) -> float:
    """Rank 0's step count at its first evaluation at or above the target (NaN if none)."""
    if target is None or steps.empty or "accuracy" not in steps.columns:
        return math.nan
    ev = steps.dropna(subset=["accuracy"])
    ev = ev[ev["rank"] == ev["rank"].min()] if not ev.empty else ev
    hit = ev[ev["accuracy"] >= target].sort_values("step")
    return float(hit["step"].iloc[0]) if not hit.empty else math.nan


def phase_bounds(folders: Folders | Path, run: str, steps: pd.DataFrame) -> list[float]:
    """Start times (training clock) of the network's phases in one run, the first at 0."""
    folder = loading.folders_of(folders)[run]
    s = tables.training_step_rows(steps)
    s = s[s["rank"] == s["rank"].min()]
    if s.empty or "t_worker" not in s.columns:
        return [0.0]
    offset = float((s["t"] - s["t_worker"]).median())
    events = network.read_events(folder)
    if events.empty:
        return [0.0]
    events = events.assign(t_applied=pd.to_numeric(events["t_applied"], errors="coerce") - offset)
    cfg = folder.config
    t_end = float(s["t_worker"].max())
    rate, streams = network.network_series(cfg, events, t_end)
    changes = sorted({float(t) for t in rate["t"].iloc[1:-1]}
                     | {float(t) for t in streams["t"].iloc[1:-1]})
    bounds = [0.0]
    for t in changes:
        if t > bounds[-1] + MERGE_S:
            bounds.append(t)
    return bounds


def phase_rates(bounds: list[float], steps: pd.DataFrame) -> list[float]:
    """Steps per second rank 0 ran in each phase; NaN after the run's last step."""
    s = tables.training_step_rows(steps)
    s = s[s["rank"] == s["rank"].min()]
    t = np.sort(s["t_worker"].to_numpy(dtype=float)) if not s.empty else np.array([])
    if not len(t):
        return [math.nan] * len(bounds)
    t_last = float(t[-1])
    out = []
    for k, a in enumerate(bounds):
        b = bounds[k + 1] if k + 1 < len(bounds) else t_last
        if a >= t_last or b <= a:
            out.append(math.nan)
            continue
        end = min(b, t_last)
        n = int(((t > a) & (t <= end)).sum())
        out.append(n / (end - a))
    return out


def ideal_tta(bounds: list[float], rates: dict[str, list[float]], n_steps: dict[str, float]
              ) -> tuple[float, list[str], int, int]:
    """(ideal TTA s, the level chosen per phase used, phases used, phases with a level
    missing); NaN when the phases with data end before progress reaches 1."""
    progress, schedule, missing = 0.0, [], 0
    for k, a in enumerate(bounds):
        cand = {lv: r[k] / n_steps[lv] for lv, r in rates.items()
                if lv in n_steps and k < len(r) and not math.isnan(r[k]) and n_steps[lv] > 0}
        if not cand:
            break
        if len(cand) < len([lv for lv in rates if lv in n_steps]):
            missing += 1
        best = max(cand, key=cand.get)
        schedule.append(best)
        speed = cand[best]
        last = k + 1 == len(bounds)
        length = math.inf if last else bounds[k + 1] - a
        if speed > 0 and progress + speed * length >= 1.0:
            return a + (1.0 - progress) / speed, schedule, k + 1, missing
        progress += speed * (0 if last else length)
    return math.nan, schedule, len(schedule), missing


def sweep_steps(runs: pd.DataFrame, steps: pd.DataFrame) -> dict[tuple[str, int], dict[str, float]]:
    """{(sweep, workers): {level: mean steps to target}} over the fixed ladder runs of the
    sweep's timeline experiments with that many workers that reached their target (one
    run per seed); the convergence a sweep measured itself, where no table is given."""
    r = tables.ok_runs(runs)
    out: dict[tuple[str, int], dict[str, float]] = {}
    if r.empty:
        return out
    r = r[(r["kind"] == "timeline") & r["method"].map(is_ladder)]
    for (sweep, workers, method), g in r.groupby(["sweep", "workers", "method"], sort=True):
        hits = [steps_to_target(steps[steps["run"] == run], tgt)
                for run, tgt in zip(g["run"], g["target_accuracy"], strict=True)]
        hits = [h for h in hits if not math.isnan(h)]
        if hits:
            out.setdefault((str(sweep), int(workers)), {})[level_of(method)] = float(np.mean(hits))
    return out


def table_of(folders: Folders | Path, runs: pd.DataFrame, workers: int | None = None
             ) -> tuple[dict[str, float], str]:
    """The convergence table a group of runs' scenario names (config.json's
    ``scenario.convergence``), as {level: mean steps} and its path; ({}, "") if none is
    named, the file is gone, or it was measured with another number of workers than
    ``workers`` (steps to target depend on the global batch)."""
    folders = loading.folders_of(folders)
    for run in runs["run"]:
        folder = folders[run]
        path = (folder.config.get("scenario") or {}).get("convergence")
        if not path:
            continue
        # a packed run folder carries its table beside config.json (``netsense pack``):
        # the path the run named was the building machine's
        for table in (folder.json("convergence.json"), files.read_json(Path(path))):
            if table is None:
                continue
            if workers and table.get("world_size") not in (None, workers):
                continue
            return convergence_steps(table), str(path)
    return {}, ""


def steps_for(folders: Folders | Path, runs: pd.DataFrame, exp_runs: pd.DataFrame,
              measured: dict[tuple[str, int], dict[str, float]]) -> tuple[dict[str, float], str]:
    """Steps to target per level for one experiment: the convergence table its scenario (or
    any run of its sweep with as many workers) names, else what its sweep's fixed runs with
    as many workers measured (:func:`sweep_steps`)."""
    sweep = str(exp_runs["sweep"].iloc[0]) if "sweep" in exp_runs else ""
    workers = exp_runs["workers"].dropna()
    w = int(workers.iloc[0]) if len(workers) else 0
    n, path = table_of(folders, exp_runs, w)
    if not n and sweep:
        same = runs[(runs["sweep"] == sweep) & (runs["workers"] == w)]
        n, path = table_of(folders, same, w)
    if n:
        return n, f"convergence table {Path(path).name}"
    got = measured.get((sweep, w), {})
    return got, (f"steps to target of the sweep's fixed {w}-worker runs" if got else "none")


def ideal_table(folders: Folders | Path, runs: pd.DataFrame, steps: pd.DataFrame
                ) -> pd.DataFrame:
    """One row per timeline experiment and seed: the ideal TTA and its schedule (module
    doc); steps to target per level from :func:`steps_for`."""
    r = tables.ok_runs(runs)
    if r.empty:
        return pd.DataFrame(columns=COLUMNS)
    folders = loading.folders_of(folders)
    measured = sweep_steps(runs, steps)
    r = r[(r["kind"] == "timeline") & r["method"].map(is_ladder)]
    out = []
    for exp, g in r.groupby("experiment", sort=True):
        n_steps, source = steps_for(folders, tables.ok_runs(runs), g, measured)
        for seed, gs in g.groupby("seed", sort=True):
            runs_s = {level_of(m): run for m, run in zip(gs["method"], gs["run"], strict=True)}
            # the phases: of the longest run (it saw the most of the schedule)
            longest = max(runs_s.values(), key=lambda run: float(
                tables.training_step_rows(steps[steps["run"] == run])["t_worker"].max()))
            bounds = phase_bounds(folders, longest, steps[steps["run"] == longest])
            rates = {}
            for lv, run in runs_s.items():
                st = steps[steps["run"] == run]
                # the run's own boundaries (its clock) as far as it saw the schedule, the
                # longest run's after that (phases it did not reach get no rate)
                own = phase_bounds(folders, run, st)
                rates[lv] = phase_rates(own + bounds[len(own):], st)
            tta, schedule, used, missing = ideal_tta(bounds, rates, n_steps)
            out.append({"experiment": exp, "seed": seed, "ideal_tta_s": tta,
                        "schedule": " ".join(schedule), "phases_used": used,
                        "levels": len(rates), "levels_missing": missing,
                        "steps_source": source})
    return pd.DataFrame(out, columns=COLUMNS)


def crossover_tables(folders: Folders | Path, runs: pd.DataFrame, steps: pd.DataFrame
                     ) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The crossover table of every static (throughput) experiment, each with the steps to
    target its sweep's convergence gives (:func:`steps_for`); rows carry ``steps_source``."""
    folders = loading.folders_of(folders)
    r = tables.ok_runs(runs)
    if r.empty:
        return tables.crossover_table(r, {})
    measured = sweep_steps(runs, steps)
    parts, crossings = [], []
    for exp, g in r[r["kind"] == "throughput"].groupby("experiment", sort=True):
        n_steps, source = steps_for(folders, r, g, measured)
        if not n_steps:
            continue
        t, c = tables.crossover_table(r, n_steps, experiment=exp)
        parts.append(t.assign(steps_source=source))
        crossings += c
    if not parts:
        return tables.crossover_table(r.iloc[0:0], {})
    return pd.concat(parts, ignore_index=True), crossings


STATIC_COLUMNS = ["experiment", "static_experiment", "workers", "rate_mbit", "oracle_level",
                  "oracle_tta_s", "netsenseml_tta_s", "netsenseml_reached", "seeds",
                  "netsenseml_x_oracle", "netsenseml_x_oracle_lo", "netsenseml_x_oracle_hi",
                  "netsenseml_levels"]


def _main_levels(steps: pd.DataFrame, run_ids: list[str]) -> str:
    """NetSenseML's levels over its runs' rank-0 training steps, most used first, with
    their share (e.g. ``fp16 92 %, int8 8 %``)."""
    s = steps[steps["run"].isin(run_ids)] if not steps.empty else steps
    if s.empty or "level" not in s.columns:
        return ""
    s = tables.training_step_rows(s)
    s = s[s["rank"] == s["rank"].min()]
    share = s["level"].astype(str).value_counts(normalize=True)
    return ", ".join(f"{lv} {100 * v:.0f} %" for lv, v in share.items() if v >= 0.05)


def static_vs_oracle(folders: Folders | Path, runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """NetSenseML at a static rate against the best fixed ladder level there.

    NetSenseML's side is measured: its runs of a ``tta`` experiment, trained to the target.
    The oracle's side is the crossover table's (:func:`crossover_tables`): each fixed
    level's mean step time at that rate (its ``throughput`` experiment's short runs) x its
    steps to target, the least of them; per seed, that level's step time of the seed x the
    same steps, so the ratio carries both sides' spread (``testbed.common.stats.ratio_ci95``).
    A ``tta`` experiment is paired with the ``throughput`` experiment of the same sweep and
    worker count (crossover.yaml: ``static-tta`` with ``static``, ``static4-tta`` with
    ``static4``). ``netsenseml_x_oracle`` = oracle TTA / NetSenseML TTA (>= 1: as fast as
    the best fixed level or faster); NaN where a seed did not reach the target.
    """
    r = tables.ok_runs(runs)
    if r.empty:
        return pd.DataFrame(columns=STATIC_COLUMNS)
    xt, _ = crossover_tables(loading.folders_of(folders), runs, steps)
    best = xt[xt["best"]] if not xt.empty else xt
    ns = r[(r["kind"] == "tta") & (r["method"] == tables.ADAPTIVE)]
    fixed = r[(r["kind"] == "throughput") & r["method"].map(is_ladder)]
    out = []
    for (exp, rate), g in ns.groupby(["experiment", "rate_mbit"], sort=True):
        sweep, w = g["sweep"].iloc[0], g["workers"].iloc[0]
        partners = fixed[(fixed["sweep"] == sweep) & (fixed["workers"] == w)
                         & (fixed["rate_mbit"] == rate)]["experiment"].unique()
        if len(partners) != 1 or best.empty:
            continue
        row = best[(best["experiment"] == partners[0]) & (best["rate_mbit"] == rate)]
        if row.empty:
            continue
        method, n_steps = str(row["method"].iloc[0]), float(row["steps_to_target"].iloc[0])
        ref = fixed[(fixed["experiment"] == partners[0]) & (fixed["rate_mbit"] == rate)
                    & (fixed["method"] == method)]
        oracle_v = ref["workers"].astype(float) * tables._batch_of(ref) / ref["throughput"] * n_steps
        all_hit = bool(g["reached_target"].all())
        x = ratio_ci95(oracle_v, g["tta_s"]) if all_hit else (math.nan, math.nan, math.nan)
        out.append({"experiment": exp, "static_experiment": partners[0], "workers": int(w),
                    "rate_mbit": rate, "oracle_level": method,
                    "oracle_tta_s": float(row["time_to_target_s"].iloc[0]),
                    "netsenseml_tta_s": float(g["tta_s"].mean()) if all_hit else math.nan,
                    "netsenseml_reached": int(g["reached_target"].sum()), "seeds": len(g),
                    "netsenseml_x_oracle": x[0], "netsenseml_x_oracle_lo": x[1],
                    "netsenseml_x_oracle_hi": x[2],
                    "netsenseml_levels": _main_levels(steps, list(g["run"]))})
    return pd.DataFrame(out, columns=STATIC_COLUMNS)
