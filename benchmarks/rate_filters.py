"""The monitor's rate filters replayed on the samples NetSenseML runs logged, offline.

    python benchmarks/rate_filters.py RESULTS_DIR [RESULTS_DIR ...] [--window 8] [--runs]

Reads NetSenseML run folders (``netsense run accel-d70 -m netsenseml``, or the committed ones
under ``results/runs/accel-policy`` and ``results/runs/accel-crossover``) and feeds rank 0's
payload periods, step by step, through a :class:`netsenseml.monitor.NetworkMonitor` of each
filter (``RATE_FILTERS``: ``sustained``, the default since issue 49; ``max``, the one before;
``median``; and ``sustained+pair``, the sustained filter with ``pair_next``):

* a step that gave the run's monitor a rate sample is that sample (``est_sample_bytes``,
  ``est_sample_s``: the period's own bytes and service time); any other step is its
  ``bytes_sent`` over its ``comm_s`` (a top-k step's one all-gather);
* a tiny collective of the run's min RTT (``est_min_rtt_s``) comes before the steps the
  hooks probe the RTT on (``rtt_probe_due``: the monitor's ages count samples);
* the window restarts where the run's policy restarted it (``model_rate_fresh`` falls to 0:
  the regime detector confirmed a change), not at the truth's edges.

At every rank-0 step with an estimate it takes the |error| against the truth the policy
needs (``testbed.analysis.sensing.NEEDED``: the available rate in idle phases, the fair share
of one more flow in congested ones) and prints the median per phase, pooled and (``--runs``)
per run. Offline only: in a real run the estimate feeds the policy, which changes what is
sent next (``netsense run`` for that).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from netsenseml.monitor import RATE_FILTERS, NetworkMonitor, rtt_probe_due

#: the monitor's filters, and the sustained one with ``pair_next`` (each rate sample taken
#: together with the payload period after it)
FILTERS = (*RATE_FILTERS, "sustained+pair")


def replay(steps: pd.DataFrame, rate_filter: str, window: int = 8) -> np.ndarray:
    """The estimate (payload Mbit/s, NaN where none) after each of rank 0's ``steps`` (sorted
    by step), from a monitor of ``rate_filter`` fed as the module docstring says."""
    paired = rate_filter.endswith("+pair")
    mon = NetworkMonitor(rate_window=window, rate_filter=rate_filter.removesuffix("+pair"),
                         pair_next=paired)
    out = np.full(len(steps), np.nan)
    fresh_before = 1.0
    for i, row in enumerate(steps.itertuples()):
        fresh = float(getattr(row, "model_rate_fresh", 1.0) or 0.0) if hasattr(row, "model_rate_fresh") else 1.0
        if fresh == 0.0 and fresh_before == 1.0:
            mon.restart_rate()
        fresh_before = fresh
        rtt = float(row.est_min_rtt_s) if pd.notna(row.est_min_rtt_s) else None
        if rtt and (mon.min_rtt is None or rtt_probe_due(int(row.step), str(row.level))):
            mon.add(4, rtt)
        if pd.notna(getattr(row, "est_sample_bytes", np.nan)):
            mon.add(float(row.est_sample_bytes), float(row.est_sample_s))
        elif row.bytes_sent > 0 and row.comm_s > 0:
            mon.add(float(row.bytes_sent), float(row.comm_s))
        est = mon.estimate()
        if est is not None and est.max_rate is not None:
            out[i] = est.max_rate * 8e-6
    return out


def run_errors(run: Path, window: int) -> dict[str, dict[str, list[float]]]:
    """|error| / truth per filter and phase, at rank 0's steps of one run."""
    from testbed.analysis import sensing

    table, _ = sensing.validate(run)
    steps = pd.read_csv(run / "steps.csv")
    world = int(steps["rank"].max()) + 1
    r0 = steps[steps["rank"] == 0].sort_values("step").reset_index(drop=True)
    m = r0.merge(table[["step", "phase", "fair_mbit", "available_mbit"]], on="step", how="left")
    scale = 2 * (world - 1) / world if world > 1 else 1.0  # link Mbit/s, as sensing scales it
    out: dict[str, dict[str, list[float]]] = {}
    for f in FILTERS:
        est = replay(r0, f, window) * scale
        errs: dict[str, list[float]] = {"idle": [], "congested": []}
        for e, ph, fair, avail in zip(est, m["phase"], m["fair_mbit"], m["available_mbit"], strict=True):
            if not isinstance(ph, str) or not np.isfinite(e):
                continue
            truth = avail if sensing.NEEDED[ph] == "available" else fair
            if truth > 0:
                errs[ph].append(abs(e - truth) / truth)
        out[f] = errs
    return out


def _cell(v: list[float]) -> str:
    return f"{100 * np.median(v):.0f} %" if v else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=8, help="samples (the monitor's rate_window)")
    ap.add_argument("--runs", action="store_true", help="a row per run and filter too")
    args = ap.parse_args()
    runs = sorted({p.parent for r in args.roots for p in r.rglob("steps.csv")
                   if "netsenseml" in p.parent.name and "paper" not in p.parent.name})
    if not runs:
        raise SystemExit("no netsenseml run folders (steps.csv) under " + ", ".join(map(str, args.roots)))
    pooled = {f: {"idle": [], "congested": []} for f in FILTERS}
    rows = []
    from testbed.analysis import sensing

    for run in runs:
        try:
            errs = run_errors(run, args.window)
        except sensing.SensingError as exc:  # e.g. top-k throughout: no rate sample ever
            print(f"skipped {run}: {str(exc).split(': ', 1)[-1][:100]}")
            continue
        for f in FILTERS:
            for ph in ("idle", "congested"):
                pooled[f][ph] += errs[f][ph]
            rows.append((f"{run.parent.name}/{run.name}", f, errs[f]))
    print(f"{len(runs)} runs, window {args.window} samples; median |error| of the replayed "
          "estimate against the truth the policy needs:")
    print("| filter | idle vs available | congested vs fair share |")
    print("|---|---|---|")
    for f in FILTERS:
        print(f"| {f} | {_cell(pooled[f]['idle'])} | {_cell(pooled[f]['congested'])} |")
    if args.runs:
        print("\n| run | filter | idle vs available | congested vs fair share |")
        print("|---|---|---|---|")
        for name, f, e in rows:
            print(f"| {name} | {f} | {_cell(e['idle'])} | {_cell(e['congested'])} |")


if __name__ == "__main__":
    main()
