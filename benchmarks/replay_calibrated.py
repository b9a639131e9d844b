"""The legacy and the current policy on a replay calibrated from real runs (no torch, no network).

The replay's link, noise and job come from on/off run folders (``netsenseml.replay.fit_runs``:
HTB burst, all-gather fixed cost, rank skew, the runs' noise); by default the three
eval-onoff runs of the policy as it was before the monitor-driven step model, kept in
``tests/netsenseml/data/eval-onoff-legacy``. Both policies then replay the same schedule
(idle and congested segments of ``--steps`` steps, I C I C I C I) over ``--seeds`` seeds:
``tests/netsenseml/legacy_policy.py`` (a frozen copy of the old policy) and
``netsenseml.policy.NetSensePolicy`` (today's, with the runs' scenario's convergence table,
``--convergence``, as the runs' own scenario loads it; ``--convergence default`` for the
stated default prior). Printed, per policy: level
changes per segment (probes left out) and their sum beyond one per segment, the share of
steps on top-k in idle and congested segments, and the replayed seconds; and the true
``J`` of the best candidates on each link (``replay.oracle``'s objective), which says how
much a choice off the oracle costs.

Why: the issue this answers asked whether the calibrated replay reproduces the real runs'
idle toggling of the old policy, so that a test could pin it. Whether it does is what this
prints; it is a measurement, not a test.

Usage: ``python benchmarks/replay_calibrated.py [--runs RUN_DIR ...] [--seeds 10] [--steps 80]
[--convergence FILE|default]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netsenseml import replay  # noqa: E402
from netsenseml.policy import NetSensePolicy  # noqa: E402
from tests.netsenseml import legacy_policy  # noqa: E402

DEFAULT_RUNS = ROOT / "tests" / "netsenseml" / "data" / "eval-onoff-legacy"
DEFAULT_TABLE = ROOT / "testbed" / "scenarios" / "convergence" / "eval-onoff-policy.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", type=Path,
                    default=sorted(p for p in DEFAULT_RUNS.iterdir() if p.is_dir()),
                    help="on/off run folders to calibrate from (default: the legacy eval-onoff runs)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=80, help="steps per segment")
    ap.add_argument("--convergence", default=str(DEFAULT_TABLE),
                    help="the current policy's convergence table (a file), or 'default'")
    args = ap.parse_args()
    prior = None if args.convergence == "default" else args.convergence
    model = replay.fit_runs(args.runs)
    print(f"calibrated from {len(args.runs)} runs: idle {model.idle.rate * 8 / 1e6:.0f} Mbit/s, "
          f"congested {model.congested.rate * 8 / 1e6:.0f} Mbit/s, noise {dict(model.noise)}")
    probe = NetSensePolicy(prior=prior)
    for name in ("idle", "congested"):
        link = getattr(model, name)
        js = sorted((probe.steps_factor(d) * replay.step_seconds(model.job, link, d), d)
                    for d in probe.candidates())
        best = ", ".join(f"{d.level}{'' if d.level != 'topk' else f' {d.ratio:.3g}'} "
                         f"{j * 1e3:.1f} ms" for j, d in js[:4])
        print(f"true J on the {name} link (best four): {best}")
    schedule = [("idle", args.steps), ("congested", args.steps)] * 3 + [("idle", args.steps)]
    links = model.links(schedule)
    phases = [p for p, n in schedule for _ in range(n)]
    print(f"\n{'policy':8} {'changes per segment (I C I C I C I), one seed a line':54} "
          f"{'beyond 1':>8} {'top-k idle':>10} {'top-k cong':>10} {'seconds':>8}")
    for name, make in (("legacy", legacy_policy.NetSensePolicy),
                       ("current", lambda: NetSensePolicy(prior=prior))):
        beyond, idle_share, cong_share, secs, lines = 0, [], [], [], []
        for seed in range(args.seeds):
            steps = replay.replay(make(), model.job, links, seed=seed, **model.noise)
            kept = [(s, ph) for s, ph in zip(steps, phases, strict=True) if not s.decision.probe]
            segs = replay.segment_changes([s.decision.level for s, _ in kept],
                                          [ph for _, ph in kept])
            beyond += sum(max(0, n - 1) for _, n in segs)
            lines.append(" ".join(str(n) for _, n in segs))
            for ph, out in (("idle", idle_share), ("congested", cong_share)):
                sel = [s for s, p in kept if p == ph]
                out.append(sum(s.decision.level == "topk" for s in sel) / max(1, len(sel)))
            secs.append(sum(s.step_s for s in steps))
        print(f"{name:8} {' | '.join(lines[:4]) + (' ...' if len(lines) > 4 else ''):54} "
              f"{beyond:>8} {statistics.fmean(idle_share):>10.2f} "
              f"{statistics.fmean(cong_share):>10.2f} {statistics.fmean(secs):>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
