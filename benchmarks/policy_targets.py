"""NetSenseML's policy targets, measured on the emulated accelerator from `netsense ab` folders.

The targets (the policy issue that ended blocked on the host's noise, re-measured on the
emulated accelerator): the sensed rate within 25 % of the available rate; at most one level
change per phase; time to accuracy >= 0.95x the hindsight-ideal schedule, and >= the best
fixed method wherever the ideal beats that by >= 1.1x; at static rates >= 0.95x the oracle
(the best fixed method at that rate). Each is printed with its 95 % interval over seeds.

The runs come from the comparison command (arms interleaved run by run, one seed each):

    netsense ab accel-d70 -a netsenseml -a topk:0.01 -a topk:0.1 -a int8 -a fp16 \\
        -a allreduce --seeds 0-5 --metric tta -r RESULTS/d70
    netsense ab accel-static -a netsenseml -a topk:0.01 \\
        --set topology.bottleneck_mbit=5000 --seeds 0-5 --metric tta -r RESULTS/static5
    python benchmarks/policy_targets.py --timeline RESULTS/d70/ab-accel-d70 \\
        --static RESULTS/static5/ab-accel-static [--include-degraded]

The timeline folder needs every fixed level of NetSenseML's ladder that the schedule may use
(else the ideal is built from fewer levels than the policy has, and is no bar). What each
figure is:

* **TTA ratios**: mean TTA of each fixed arm / mean TTA of NetSenseML (> 1: NetSenseML
  faster), percentile-bootstrap 95 % interval, permutation p (``testbed.common.stats``).
* **vs ideal**: the ideal TTA of each seed (``testbed.analysis.ideal``: per phase the fixed
  level with the most progress per second, from the fixed runs of that seed) against
  NetSenseML's TTA of that seed: mean ideal / mean NetSenseML with its interval.
* **sensing**: per NetSenseML run, the median |estimate - available| / available in idle and
  congested phases (``testbed.analysis.sensing``); the mean over runs with its t-interval.
* **changes per phase**: the cross-traffic segments of every NetSenseML run with more than
  one level change (probes left out), as a share of all segments, with a Wilson 95 % interval.

Degraded runs (the host's lateness added more than 1 % to the training time: judged again
from the records by the current rule) are left out unless ``--include-degraded``; how many,
and the most any run's lateness added, are printed. Reads run folders only (no root, no network).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.analysis import ideal, sensing, tables  # noqa: E402
from testbed.common import files, metrics, stats  # noqa: E402
from testbed.config.accelerator import Accelerator  # noqa: E402

ADAPTIVE = "netsenseml"


def _late_share(steps: pd.DataFrame, run: str) -> float | None:
    """What the host's lateness added to the run's training time (the current rule:
    ``testbed.common.metrics.overruns``), from its records; None for a native run."""
    rows = steps[steps["run"] == run]
    if "pace_late_s" not in rows or "step_s" not in rows:
        return None
    over = metrics.overruns(rows.to_dict("records"))
    return None if over is None else over.get("late_share")


def _max_overrun(root: Path, run: str) -> float:
    """The run's own ``accelerator.max_overrun`` (its scenario as config.json holds it)."""
    config = files.read_json(root / run / "config.json") or {}
    acc = (config.get("scenario") or {}).get("accelerator") or {}
    return float(acc.get("max_overrun", Accelerator.model_fields["max_overrun"].default))


def _runs(root: Path, include_degraded: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ok runs; degraded ones (judged again by the current rule from their records,
    whatever rule their summary was written with) left out unless asked."""
    runs, steps = tables.load_runs(root)
    ok = runs[runs["status"] == "ok"].copy()
    ok["late_share"] = [_late_share(steps, run) for run in ok["run"]]
    limit = pd.Series([_max_overrun(root, run) for run in ok["run"]], index=ok.index)
    degraded = ok["late_share"].fillna(0.0) > limit
    old_rule = int((ok["degraded"].fillna("").astype(str) != "").sum())
    print(f"# {root}: {len(runs)} runs, {int((runs['status'] != 'ok').sum())} not ok, "
          f"{int(degraded.sum())} degraded: lateness > max_overrun ({limit.max():.0%}) of the training time "
          f"({'counted' if include_degraded else 'left out'}; {old_rule} by the share of late "
          f"steps their summaries were judged by); lateness added at most "
          f"{ok['late_share'].max():.3%}")
    if not include_degraded:
        ok = ok[~degraded]
    ok.attrs.update(runs.attrs, include_degraded=include_degraded)
    return ok, steps


def _tta(runs: pd.DataFrame, method: str) -> dict[int, float]:
    g = runs[(runs["method"] == method) & runs["tta_s"].notna()]
    return {int(s): float(t) for s, t in zip(g["seed"], g["tta_s"], strict=True)}


def _ratio(label: str, num: list[float], den: list[float]) -> float:
    r = stats.bootstrap_ratio(num, den)
    p = stats.permutation_p(num, den)
    print(f"  {label:<34} {r.ratio:6.3f} [{r.lo:.3f}, {r.hi:.3f}]  p {p:.3g}  "
          f"(n {len(num)} / {len(den)})")
    return r.ratio


def tta_ratios(runs: pd.DataFrame) -> dict[str, float]:
    """Mean TTA per method and each fixed method's ratio to NetSenseML's."""
    means = {}
    print("time to accuracy, virtual s (mean over seeds; ratio = fixed / netsenseml):")
    mine = _tta(runs, ADAPTIVE)
    for method in sorted(set(runs["method"]), key=lambda m: (m != ADAPTIVE, m)):
        t = _tta(runs, method)
        ci = stats.ci95(list(t.values()))
        means[method] = ci.mean
        print(f"  {method:<12} mean {ci.mean:.4f} +- {ci.half:.4f} (n {len(t)})")
    for method in means:
        if method != ADAPTIVE:
            _ratio(f"{method} / {ADAPTIVE}", list(_tta(runs, method).values()),
                   list(mine.values()))
    return means


def vs_ideal(root: Path, runs: pd.DataFrame, steps: pd.DataFrame, means: dict[str, float]
             ) -> None:
    table = ideal.ideal_table(root, runs, steps)
    mine = _tta(runs, ADAPTIVE)
    if table.empty or not mine:
        print("vs ideal: no ideal schedule (needs the fixed levels' runs of each seed)")
        return
    seeds = [int(s) for s in table["seed"] if int(s) in mine]
    ideal_t = [float(table.loc[table["seed"] == s, "ideal_tta_s"].iloc[0]) for s in seeds]
    print(f"vs the hindsight-ideal schedule (seeds {seeds}; schedules "
          f"{sorted(set(table['schedule']))}):")
    _ratio("ideal TTA / netsenseml TTA (>= 0.95)", ideal_t, [mine[s] for s in seeds])
    fixed = {m: t for m, t in means.items() if m != ADAPTIVE and not math.isnan(t)}
    if fixed:
        best = min(fixed, key=fixed.get)
        gain = fixed[best] / (sum(ideal_t) / len(ideal_t))
        print(f"  best fixed method {best}: mean TTA {fixed[best]:.4f}; the ideal beats it "
              f"{gain:.3f}x ({'>= 1.1: NetSenseML must match it' if gain >= 1.1 else '< 1.1: no bar'})")


def _wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sensing_and_changes(root: Path, runs: pd.DataFrame) -> None:
    idle, congested, segments = [], [], []
    for run in runs.loc[runs["method"] == ADAPTIVE, "run"]:
        try:
            _table, summary = sensing.validate(root / run)
        except sensing.SensingError as exc:
            print(f"  {run}: no sensing check ({exc})")
            continue
        idle.append(summary.get("rate_medae_rel_idle"))
        congested.append(summary.get("rate_medae_rel_congested"))
        segments += summary.get("segments") or []
    print(f"sensing: median |estimate - available| / available per run (target <= 0.25), "
          f"{len(idle)} runs:")
    for name, vals in (("idle", idle), ("congested", congested)):
        ci = stats.ci95(stats.finite(vals))
        print(f"  {name:<10} mean {ci.mean:.3f} +- {ci.half:.3f}  values "
              f"{[round(v, 3) for v in stats.finite(vals)]}")
    many = sum(1 for s in segments if s["changes"] > 1)
    lo, hi = _wilson(many, len(segments))
    print(f"level changes: {many} of {len(segments)} phases with more than one change "
          f"({many / max(len(segments), 1):.1%} [{lo:.1%}, {hi:.1%}] Wilson 95 %); most in "
          f"one phase {max((s['changes'] for s in segments), default=0)}")


def static_oracle(root: Path, include_degraded: bool) -> None:
    runs, _steps = _runs(root, include_degraded)
    mine = _tta(runs, ADAPTIVE)
    print("static rate: the oracle (best fixed level at this rate) / netsenseml, TTA "
          "(target >= 0.95):")
    for method in sorted(set(runs["method"]) - {ADAPTIVE}):
        _ratio(f"{method} / {ADAPTIVE}", list(_tta(runs, method).values()),
               list(mine.values()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--timeline", type=Path, help="a `netsense ab` folder of a timeline "
                   "scenario: NetSenseML and every fixed level of its ladder")
    p.add_argument("--static", type=Path, help="a `netsense ab` folder at one static rate: "
                   "NetSenseML and the best fixed level there")
    p.add_argument("--include-degraded", action="store_true")
    args = p.parse_args()
    if args.timeline:
        runs, steps = _runs(args.timeline, args.include_degraded)
        means = tta_ratios(runs)
        vs_ideal(args.timeline, runs, steps, means)
        sensing_and_changes(args.timeline, runs)
    if args.static:
        static_oracle(args.static, args.include_degraded)
    if not (args.timeline or args.static):
        p.error("give --timeline and/or --static")


if __name__ == "__main__":
    main()
