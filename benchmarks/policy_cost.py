"""What NetSenseML's policy costs per step on the CPU: ``NetSensePolicy.observe``, timed.

    .venv/bin/python benchmarks/policy_cost.py [--steps 600] [--repeats 20]

The hooks call ``observe`` once a step, on every rank, inside the step: its time is part of
the adaptive method's overhead (``benchmarks/hook_overhead.py`` measures the whole of it on
real ranks). Here the policy alone: a replayed job (``netsenseml.replay``, the evaluation's
MLP on a 500 Mbit/s link, idle / 8 competing streams / idle, a busy host's noise) is run
once to record the observations the policy saw, then fresh policies are fed the same
observations ``--repeats`` times; prints the fastest pass's time per observation (the
least disturbed by the machine) and the median's.
"""

from __future__ import annotations

import argparse
import statistics
import time

from netsenseml.policy import NetSensePolicy
from netsenseml.replay import Job, Link, calibration, replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    job = Job(dense_bytes=2.2e6, compute_s=0.009, gather_fixed_s=0.003,
              codec_s={"none": 0.0, "fp16": 1e-3, "bf16": 1e-3, "int8": 4e-3, "topk": 3e-3})
    rate = 62.5e6  # 500 Mbit/s in bytes/s
    idle = Link(rate, latency=3e-4, burst=125e3, burst_rate=10 * rate)
    busy = Link(rate / 9, latency=3e-4, queue=100 * 1500 / rate, burst=125e3,
                burst_rate=4 * rate / 9)
    third = a.steps // 3
    links = [idle] * third + [busy] * third + [idle] * (a.steps - 2 * third)
    seen = []

    class Recorder(NetSensePolicy):
        def observe(self, obs):  # type: ignore[override]
            seen.append(obs)
            return super().observe(obs)

    replay(Recorder(), job, links, seed=1, jitter=0.15, compute_jitter=0.15, delay_s=0.004)
    per = []
    for _ in range(a.repeats):
        p = NetSensePolicy()
        p.calibrate(calibration(job, idle))
        t = time.perf_counter()
        for obs in seen:
            p.observe(obs)
        per.append((time.perf_counter() - t) / len(seen))
    print(f"{len(seen)} observations, {a.repeats} passes: per observation "
          f"fastest {min(per) * 1e3:.3f} ms, median {statistics.median(per) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
