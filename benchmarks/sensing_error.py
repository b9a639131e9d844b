"""The network monitor's error against the bottleneck's truth, over NetSenseML runs.

Issue 19's sensing targets (median |error| of the rate estimate <= 25 % of the available
rate in idle and in congested phases; min RTT within 2x of the path's base RTT; <= 1 level
change per segment) are judged on real emulated runs, so this script only reads run
folders; make them first (root, ~25 s a run on the 2-core build machine):

    flock /tmp/netsense-heavy.lock netsense run eval-onoff -m netsenseml -s 0 -s 1 -s 2 -r /tmp/sense
    flock /tmp/netsense-heavy.lock netsense run eval-ramp -m netsenseml -s 0 -s 1 -s 2 -r /tmp/sense
    python benchmarks/sensing_error.py /tmp/sense

One row per run (``testbed.analysis.sensing.validate``): coverage (rank-0 steps with an
estimate), median |error| relative to the available rate and to the fair share per phase,
the error against the truth the policy needs (``sensing.NEEDED``: available when idle, fair
share when congested) with the congested bias,
the monitor's min RTT beside the kernel's ``tcpi_min_rtt``, level changes per
cross-traffic segment, as labels (fp16 -> top-k) and as ladder rungs (a top-k ratio move is
one), probes left out, and the run's dilation factor ``k`` (what a job gets beside the cross
traffic depends on it: ``docs/results-log.md``, 2026-12-07); then the segments with more
than one label change, of all.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", type=Path,
                    help="results folders (or run folders) holding netsenseml runs")
    args = ap.parse_args()
    from testbed.analysis import sensing

    runs = sorted({p.parent for r in args.roots for p in r.rglob("steps.csv")
                   if "netsenseml" in p.parent.name})
    if not runs:
        raise SystemExit("no netsenseml run folders (steps.csv) under " + ", ".join(map(str, args.roots)))
    print("| run | coverage | idle vs avail | idle vs fair | congested vs avail | congested vs fair "
          "| policy's truth: idle / congested (bias) "
          "| min RTT ms (monitor / kernel) | label changes per segment | rung changes per segment "
          "| k |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    all_segments: list[dict] = []
    for run in runs:
        name = f"{run.parent.name}/{run.name}"
        try:
            _, s = sensing.validate(run)
        except sensing.SensingError as exc:
            print(f"| {name} | no estimate: {str(exc).split(': ', 1)[-1][:80]} |  |  |  |  |  |  |  |  |")
            continue
        segs = s["segments"]
        all_segments.extend(segs)
        print(f"| {name} | {_pct(s['coverage'])} | {_pct(s['rate_medae_rel_idle'])} "
              f"| {_pct(s.get('rate_medae_rel_idle_fair'))} | {_pct(s['rate_medae_rel_congested'])} "
              f"| {_pct(s.get('rate_medae_rel_congested_fair'))} "
              f"| {_pct(s.get('rate_medae_rel_idle_needed'))} / {_pct(s.get('rate_medae_rel_congested_needed'))}"
              f" ({_signed(s.get('rate_bias_rel_congested_needed'))}) "
              f"| {s['est_min_rtt_ms']} / {s['tcp_min_rtt_ms']} "
              f"| {' '.join(x['phase'][0] + str(x['changes']) for x in segs)} "
              f"| {' '.join(x['phase'][0] + str(x.get('ladder_changes', '-')) for x in segs)} "
              f"| {s.get('dilation', 1.0):g} |")
    if all_segments:
        over = sum(1 for x in all_segments if x["changes"] > 1)
        print(f"\nsegments with more than one label change: {over} of {len(all_segments)}; "
              f"label changes in all: {sum(x['changes'] for x in all_segments)}")


if __name__ == "__main__":
    main()
