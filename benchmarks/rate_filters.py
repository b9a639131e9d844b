"""Which rate filter the monitor's recorded samples would have called for, offline.

    python benchmarks/rate_filters.py RESULTS_DIR [RESULTS_DIR ...] [--window 8]

Reads NetSenseML run folders (``netsense run eval-onoff|eval-ramp -m netsenseml``; see
``benchmarks/sensing_error.py``), takes rank 0's rate samples as the monitor logged them
(``est_sample_bytes / (est_sample_s - est_sample_rtt_s)``: a new sample wherever those
columns change), and re-filters them over the last ``--window`` samples, the window emptied
at every cross-traffic edge (the real monitor restarts it when the policy's detector
confirms the change, a few steps later). At every rank-0 step with a sample in the window it
prints the median |error| against the sensing analysis's truths
(``testbed.analysis.sensing``): the available rate in idle and congested phases, and the fair
share of one more flow in congested ones.

Two more numbers say why no window filter reaches issue 19's 25 % in congested phases: the
rate of every dense step sent there against the fair share (its spread), and how many
samples a congested phase gets (the policy sends few dense steps while compressing pays).
Offline only: in a real run the estimate feeds the policy, which changes what is sent next.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

FILTERS = {
    "max": lambda v: float(np.max(v)),  # the monitor's default (BBR's)
    "median": lambda v: float(np.median(v)),  # the monitor's rate_filter="median"
    "q75": lambda v: float(np.percentile(v, 75)),
    "max of median-3": lambda v: (float(np.median(v)) if len(v) < 3
                                  else max(float(np.median(v[i:i + 3])) for i in range(len(v) - 2))),
}


def _run(run: Path, window: int, errors: dict, dense: list, counts: list) -> None:
    from testbed.analysis import sensing

    table, _ = sensing.validate(run)
    steps = pd.read_csv(run / "steps.csv")
    world = int(steps["rank"].max()) + 1
    steps = steps[steps["rank"] == 0].reset_index(drop=True)
    m = steps.merge(table[["step", "phase", "fair_mbit", "available_mbit"]], on="step")
    cols = ["est_sample_bytes", "est_sample_s", "est_sample_rtt_s"]
    key = m[cols].astype(float).round(9)
    new = (key != key.shift()).any(axis=1) & m["est_sample_bytes"].notna()
    rate = m["est_sample_bytes"] * 8 / (m["est_sample_s"] - m["est_sample_rtt_s"]) / 1e6
    # the link rate a ring all-reduce puts on each link, as the sensing analysis scales it
    rate = rate * 2 * (world - 1) / world
    congested = m[(m["phase"] == "congested") & m["level"].isin(["none", "fp16", "bf16"])]
    dense.extend((congested["bytes_sent"] * 8 / congested["comm_s"] / 1e6 / congested["fair_mbit"]).tolist())
    window_now: list[float] = []
    phase, n_phase = None, 0
    for i, row in m.iterrows():
        if row["phase"] != phase:
            if phase == "congested":
                counts.append(n_phase)
            window_now, phase, n_phase = [], row["phase"], 0
        if new[i]:
            window_now = (window_now + [float(rate[i])])[-window:]
            n_phase += 1
        if not window_now or row["available_mbit"] <= 0:
            continue
        for name, f in FILTERS.items():
            est = f(np.array(window_now))
            errors[name][row["phase"]].append(abs(est - row["available_mbit"]) / row["available_mbit"])
            if row["phase"] == "congested":
                errors[name]["congested_fair"].append(abs(est - row["fair_mbit"]) / row["fair_mbit"])
    if phase == "congested":
        counts.append(n_phase)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=8, help="samples (the monitor's rate_window)")
    args = ap.parse_args()
    runs = sorted({p.parent for r in args.roots for p in r.rglob("steps.csv")
                   if "netsenseml" in p.parent.name})
    if not runs:
        raise SystemExit("no netsenseml run folders (steps.csv) under " + ", ".join(map(str, args.roots)))
    errors = {name: {"idle": [], "congested": [], "congested_fair": []} for name in FILTERS}
    dense: list[float] = []
    counts: list[int] = []
    for run in runs:
        _run(run, args.window, errors, dense, counts)
    print(f"{len(runs)} runs, window {args.window} samples; median |error| of the re-filtered estimate:")
    print("| filter | idle vs available | congested vs available | congested vs fair share |")
    print("|---|---|---|---|")
    for name, e in errors.items():
        cells = [f"{100 * np.median(e[k]):.0f} %" if e[k] else "-" for k in ("idle", "congested", "congested_fair")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if dense:
        q = np.percentile(dense, [10, 25, 50, 75, 90])
        print(f"dense steps in congested phases: {len(dense)}; their rate / fair share, "
              f"10/25/50/75/90 %: " + " / ".join(f"{x:.2f}" for x in q))
    if counts:
        print(f"rate samples per congested phase: median {np.median(counts):.0f}, "
              f"range {min(counts)}-{max(counts)} ({len(counts)} phases)")


if __name__ == "__main__":
    main()
