"""NetSenseML's policy on synthetic traces: the response table (no torch, no network).

Replays links through ``netsenseml.replay`` (the hook's step loop: decisions apply two
steps after the step they are drawn from) and prints, per job and bottleneck rate:

1. **Response**: for 0, 1, 2, 4, 8, 16, 32, 50 competing streams (the job's share is
   ``rate / (streams + 1)``; with streams a full 100-packet queue stands), held 40 steps
   each in one rising ramp, the decision held at the end of each level by ``netsenseml``,
   the decision its objective takes with the link known exactly (``oracle``), the
   prototype's rule (``netsenseml-paper``), and step times (netsenseml, allreduce).
2. **Recovery**: idle 50 steps, N streams 60 steps, idle 60 steps: the steps from the
   onset until netsenseml sends less than before, and from the end until it sends at
   least as much as before for good (its idle decision or less compression).
3. **Steadiness**: decision changes in 500 steps on one link, from step 3 on (probe steps,
   one-step measurements, left out).
4. **Busy host**: the noise seen on this machine's emulated 1 Gbit/s links (every
   collective x U(0.8, 1.2), + U(0, 4 ms), 5 % of them +20 ms x U(0.5, 1.5)): the MLP of
   ``policy-steps.yaml`` (17 ms compute) idle 100 steps, 8 streams 100, idle 200; the
   most held decisions per phase, decision changes and probes, 4 seeds.
5. **Host noise, steady and stepwise** (compute and communication each x U(0.85, 1.15),
   what the real runs show): level changes in 500 steady steps (from step 10) per job and
   link, 5 seeds; the stepwise ramp (0, 1, 2, 4, 8, 16 streams, 60 steps each, then idle)
   with level changes per stable segment (its first 10 steps left out) and the idle-link
   throughput of netsenseml against allreduce (step-time ratio over the idle segments).
6. ``--real RUN_DIR [RUN_DIR ...]``: the same per-segment figures from real runs'
   ``steps.csv`` (rank 0, probes left out; segments from ``--segments``, seconds since the
   first step, the first ``--settle`` seconds of each left out), e.g. for
   ``netsense run policy-steps -m netsenseml allreduce``.

Noise in sections 1-3: each collective's time x U(0.9, 1.1), 2 % of them +10 ms x
U(0.5, 1.5) (one-sided spikes, as on the emulated links); seed 0.

Usage: ``python benchmarks/policy_response.py [--jobs mlp slow 10m] [--rates 10 100 1000]``
``[--seeds N]`` (sections 4 and 5 with N seeds each instead of 4, 5 and 3: a quick look, as
the test that runs every benchmark at a tiny size takes)
``python benchmarks/policy_response.py --real RUNS/policy-steps/*-s0``
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netsenseml.paper_rule import PaperRule  # noqa: E402
from netsenseml.policy import Decision, NetSensePolicy  # noqa: E402
from netsenseml.replay import (  # noqa: E402
    Job,
    Link,
    changes,
    level_changes,
    oracle,
    replay,
    step_seconds,
)

JOBS = {
    # the emulated MLP (width 512): 1.2 MB gradient, ~7 ms compute, sampled top-k ~3 ms
    "mlp": Job(dense_bytes=1.2e6, compute_s=0.007),
    # the same gradient behind 30x the compute
    "slow": Job(dense_bytes=1.2e6, compute_s=0.2),
    # a 10M-parameter model on a CPU: 40 MB in 2 buckets, 1 s compute of which 0.5 s can
    # hide communication, top-k's selection 0.1 s
    "10m": Job(dense_bytes=40e6, compute_s=1.0, buckets=2, hidden_s=0.5,
               codec_s={"none": 0.0, "fp16": 0.01, "bf16": 0.01, "int8": 0.06, "topk": 0.1}),
}
STREAMS = (0, 1, 2, 4, 8, 16, 32, 50)
HOLD = 40
NOISE = {"jitter": 0.1, "spike_prob": 0.02, "spike_s": 0.01}


def link(rate_mbit: float, streams: int) -> Link:
    rate = rate_mbit * 1e6 / 8
    return Link(rate / (streams + 1), queue=100 * 1500 / rate if streams else 0.0)


def fmt(d: Decision) -> str:
    return f"topk {d.ratio:.4f}" if d.level == "topk" else d.level


def response(name: str, job: Job, rate: float) -> None:
    links = [link(rate, n) for n in STREAMS for _ in range(HOLD)]
    ns = replay(NetSensePolicy(), job, links, **NOISE)
    paper = replay(PaperRule(), job, links, **NOISE)
    print(f"\n{name} at {rate:g} Mbit/s -- response (decision held after {HOLD} steps per level)")
    print(f"{'streams':>7} {'share Mbit/s':>12} {'netsenseml':>12} {'oracle':>12} {'paper':>12}"
          f" {'step ms':>8} {'allreduce ms':>12} {'paper ms':>8}")
    for i, n in enumerate(STREAMS):
        end = HOLD * (i + 1) - 1
        lk = links[end]
        d, p = ns[end].decision, paper[end].decision
        print(f"{n:>7} {lk.rate * 8 / 1e6:>12.2f} {fmt(d):>12} {fmt(oracle(job, lk)):>12} {fmt(p):>12}"
              f" {1e3 * step_seconds(job, lk, d):>8.1f} {1e3 * step_seconds(job, lk, Decision('none')):>12.1f}"
              f" {1e3 * step_seconds(job, lk, p):>8.1f}")


def recovery(name: str, job: Job, rate: float) -> None:
    cells = []
    for n in (1, 4, 16, 50):
        links = [link(rate, 0)] * 50 + [link(rate, n)] * 60 + [link(rate, 0)] * 60
        steps = replay(NetSensePolicy(), job, links, **NOISE)
        idle = steps[49].decision
        sent = steps[49].bytes_sent
        react = next((i for i, s in enumerate(steps[50:110]) if s.bytes_sent < sent), None)
        back = next((i for i in range(60) if all(s.bytes_sent >= sent for s in steps[110 + i:])), None)
        cells.append(f"{n} streams: {fmt(idle)} -> {fmt(steps[109].decision)}, "
                     f"reacts {react if react is not None else '-'}, back {back if back is not None else '-'}")
    print(f"{name} at {rate:g} Mbit/s -- recovery (steps after onset / after end): " + "; ".join(cells))


def steadiness(name: str, job: Job, rate: float) -> None:
    cells = []
    for n in (0, 4, 50):
        steps = replay(NetSensePolicy(), job, [link(rate, n)] * 500, **NOISE)
        cells.append(f"{n} streams {fmt(steps[-1].decision)}: {changes(steps[2:])}")
    print(f"{name} at {rate:g} Mbit/s -- changes in 500 steady steps: " + "; ".join(cells))


def busy_host(seeds: int = 4) -> None:
    job = Job(dense_bytes=1.2e6, compute_s=0.017,
              codec_s={"none": 5e-4, "fp16": 7e-4, "bf16": 7e-4, "int8": 3.5e-3, "topk": 3e-3})
    rate = 0.8 * 125e6  # what the emulated 1 Gbit/s link carries here
    links = [Link(rate, 1e-3)] * 100 + [Link(rate / 9, 1e-3, 100 * 1500 / 125e6)] * 100
    links += [Link(rate, 1e-3)] * 200
    print("\nbusy host (policy-steps MLP, 1 Gbit/s, 8 streams from step 100 to 200):")
    for seed in range(seeds):
        policy = NetSensePolicy()
        steps = replay(policy, job, links, seed=seed, jitter=0.2, spike_prob=0.05, spike_s=0.02,
                       delay_s=0.004)
        kept = [s for s in steps if not s.decision.probe]
        print(f"  seed {seed}: idle [{most(kept, 20, 100)}]  8 streams [{most(kept, 120, 200)}]"
              f"  idle again [{most(kept, 200, 400)}]  changes {changes(steps)}, probes {policy.probes}")


HOST = {"jitter": 0.15, "compute_jitter": 0.15}
# policy-steps.yaml's MLP as measured on the emulated 1 Gbit/s link (an all-gather costs
# ~4 ms more than an allreduce there)
REAL_MLP = Job(dense_bytes=1.2e6, compute_s=0.017, gather_fixed_s=0.004,
               codec_s={"none": 5e-4, "fp16": 7e-4, "bf16": 7e-4, "int8": 3.5e-3, "topk": 3e-3})
SEGMENT_STREAMS = (0, 1, 2, 4, 8, 16, 0)


def host_noise(jobs: dict[str, Job], rate_mbit: float, seeds: int | None = None) -> None:
    print(f"\nhost noise (compute and comm x U(0.85, 1.15)) at {rate_mbit:g} Mbit/s")
    for name, job in jobs.items():
        cells = []
        for n in (0, 2, 8):
            counts = [level_changes(replay(NetSensePolicy(), job, [link(rate_mbit, n)] * 500, seed=seed,
                                           **HOST)[9:]) for seed in range(seeds or 5)]
            cells.append(f"{n} streams {counts}")
        print(f"  {name}: level changes in 500 steady steps ({seeds or 5} seeds): "
              + "; ".join(cells))
        links = [link(rate_mbit, n) for n in SEGMENT_STREAMS for _ in range(60)]
        for seed in range(seeds or 3):
            steps = replay(NetSensePolicy(), job, links, seed=seed, **HOST)
            segs = [[s for s in steps[60 * i + 10:60 * (i + 1)] if not s.decision.probe]
                    for i in range(len(SEGMENT_STREAMS))]
            idle = [s for i in (0, len(SEGMENT_STREAMS) - 1) for s in segs[i]]
            ratio = (statistics.mean(s.step_s for s in idle)
                     / statistics.mean(step_seconds(job, s.link, Decision("none")) for s in idle))
            print(f"    seed {seed} ramp {'/'.join(map(str, SEGMENT_STREAMS))} streams: level changes per "
                  f"segment {[level_changes(g) for g in segs]}, held {[most(g, 0, 10**9) for g in segs]}, "
                  f"idle step time / allreduce {ratio:.3f}")


def real(runs: list[str], segments: list[float], settle: float) -> None:
    print("\nreal runs: level changes per segment (rank 0, probes left out)")
    for run in runs:
        rows = [r for r in csv.DictReader(open(Path(run) / "steps.csv")) if r["rank"] == "0"]
        t0 = float(rows[0]["t"])
        print(f"  {Path(run).name}")
        for a, b in zip(segments, segments[1:], strict=False):
            seg = [r for r in rows if a + settle <= float(r["t"]) - t0 < b and r.get("probe", "0") in ("0", "")]
            if not seg:
                continue
            ch = sum(1 for x, y in zip(seg, seg[1:], strict=False) if x["level"] != y["level"])
            held = Counter(r["level"] for r in seg).most_common(2)
            step_ms = 1e3 * statistics.median(float(r["step_s"]) for r in seg)
            print(f"    {a + settle:5.1f}-{b:5.1f} s: {len(seg):4d} steps, median step {step_ms:6.1f} ms, "
                  f"level changes {ch}, held {held}")


def most(steps: list, a: int, b: int) -> str:
    """The two decisions held most often in steps ``a`` to ``b - 1``."""
    seen = Counter(fmt(s.decision) for s in steps if a <= s.step < b).most_common(2)
    return ", ".join(f"{d} x{n}" for d, n in seen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--rates", nargs="+", type=float, default=[10, 100, 1000])
    ap.add_argument("--real", nargs="+", help="run folders (with steps.csv) to summarise instead")
    ap.add_argument("--segments", default="0,6,12,18,24,30,36,60",
                    help="segment edges in seconds since the first step (policy-steps.yaml's)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds left out at each segment's start")
    ap.add_argument("--seeds", type=int, default=None,
                    help="seeds of the busy-host and host-noise sections (default 4, and 5 / 3)")
    args = ap.parse_args()
    if args.real:
        real(args.real, [float(x) for x in args.segments.split(",")], args.settle)
        return 0
    for name in args.jobs:
        print(f"\n=== job {name}: {JOBS[name]}")
        for rate in args.rates:
            response(name, JOBS[name], rate)
        print()
        for rate in args.rates:
            recovery(name, JOBS[name], rate)
        for rate in args.rates:
            steadiness(name, JOBS[name], rate)
    busy_host(args.seeds or 4)
    host_noise({"real-mlp": REAL_MLP, **{k: JOBS[k] for k in args.jobs if k != "10m"}},
               max(args.rates), args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
