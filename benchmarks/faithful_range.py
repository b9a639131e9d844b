"""The emulation's faithful range: goodput and step time against the configured rate, with
the workers' compute running on the same cores.

Why: HTB on veth is software. Every shaped packet costs CPU in the sender's softirq, on the
same cores the emulated workers train on, so above some rate the emulated link no longer
delivers what it is configured to (the shaper or the TCP stack cannot keep up) and the
workers' compute slows down beside it. A run configured above that rate measures the
machine, not the network; the testbed states the highest faithful rate
(``testbed.config.faithful``), `netsense doctor --range` re-checks it on the machine at
hand, and a run configured above it carries a warning in summary.json and the report.

What is measured, per configured rate R (1+1 dumbbell, the bottleneck at R, the access
links at ``--access`` Mbit/s so that only the bottleneck shapes):

- ``idle``: iperf3 goodput of one TCP flow across the bottleneck, nothing else running;
- ``loaded``: the same while ``--workers`` processes run the workers' compute (forward +
  backward + SGD of the evaluation MLP, one torch thread each, like the workers) on the
  same cores; their step time beside the flow against their step time alone (``compute x``);
- ``faithful``: loaded goodput / R at least 95 % of the efficiency at the reference rate
  (``--ref``, 100 Mbit/s: TCP/IP and Ethernet headers take ~4.4 % at any rate, so the bar
  is what the stack delivers where shaping is surely exact, not R itself), and with
  ``--steps`` also ``comm x`` within 5 % of its value at the reference rate;
- ``step``: with ``--steps``, one 2-worker allreduce run of ``eval-static`` at R (MLP width
  512, batch ``--batch``): its median step, compute and comm time, and comm against the
  gradient's transfer time at the reference efficiency (``comm x`` = measured / (8 V /
  (e_ref R)), 1.0 = the link alone sets the transfer time).

    .venv/bin/python benchmarks/faithful_range.py [--rates 100,500,1000,2000,3000,5000]
        [--seconds 3] [--workers 2] [--steps] [--csv FILE]

Needs root, mnexec, tc, iperf3. Run it under the heavy-work lock on an otherwise idle
machine; it prints a table and the highest faithful rate (every lower rate faithful too).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.emulation import Emulation, leftovers  # noqa: E402

TOLERANCE = 0.05
GRADIENT_BYTES = 2_192_560  # MLP width 512 on mixture: 548,140 fp32 parameters

LOAD = r"""
import sys, time, torch
torch.set_num_threads(1)
from workloads.models.mlp import build_mlp
m = build_mlp((256,), 300, width=512)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(int(sys.argv[1]), 256); y = torch.randint(0, 300, (int(sys.argv[1]),))
stop = time.monotonic() + float(sys.argv[2]); times = []
while time.monotonic() < stop:
    t = time.perf_counter(); opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    times.append(time.perf_counter() - t)
times.sort(); print(times[len(times) // 2])
"""


def compute_load(n: int, batch: int, seconds: float) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return [subprocess.Popen([sys.executable, "-c", LOAD, str(batch), f"{seconds:g}"],
                             stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]


def median_step(procs: list[subprocess.Popen]) -> float:
    vals = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        vals.append(float(out.strip()))
    return statistics.median(vals)


def goodputs(rate: float, access: float, seconds: float, workers: int, batch: int
             ) -> tuple[float, float, float]:
    """(idle goodput, loaded goodput, compute step beside the flow / compute step alone)."""
    emu = Emulation("dumbbell", {"n_left": 1, "n_right": 1, "n_cross": 0,
                                 "bottleneck_mbit": rate, "access_mbit": access})
    emu.start()
    try:
        src, dst = emu.worker_hosts[0], emu.worker_hosts[-1]
        idle = emu.iperf3_goodput(src, dst, seconds)
        alone = median_step(compute_load(workers, batch, seconds))
        procs = compute_load(workers, batch, seconds + 2.0)
        time.sleep(1.0)  # the loads are past their imports and computing
        loaded = emu.iperf3_goodput(src, dst, seconds)
        step = median_step(procs)
    finally:
        emu.stop()
    left = leftovers.find(prefix=emu.prefix)
    if left["interfaces"] or left["pids"]:
        raise SystemExit(f"leftovers after stop: {left}")
    return idle, loaded, step / alone


def training_step(rate: float, access: float, batch: int, out: Path) -> dict[str, float]:
    """Median step/compute/comm (s) of one 2-worker allreduce run of eval-static at ``rate``."""
    res = out / f"r{rate:g}"
    cmd = [sys.executable, "-m", "testbed.cli", "run", "eval-static", "-q", "-r", str(res),
           "-m", "allreduce", "--set", f"topology.bottleneck_mbit={rate:g}",
           "--set", f"topology.access_mbit={access:g}", "--set", f"workload.batch_size={batch}",
           "--set", "workload.time_limit_s=4", "--set", "workload.args.stop-at-target=false"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    steps = next(res.rglob("steps.csv"))
    with open(steps) as fh:
        rows = [r for r in csv.DictReader(fh) if r["rank"] == "0" and r.get("samples")]
    rows = rows[2:]  # rendezvous and bucket set-up
    med = {k: statistics.median(float(r[k]) for r in rows)
           for k in ("step_s", "compute_s", "comm_s")}
    med["steps"] = len(rows)
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,500,1000,2000,3000,5000")
    ap.add_argument("--ref", type=float, default=100.0, help="reference rate, Mbit/s")
    ap.add_argument("--access", type=float, default=10000.0, help="access links, Mbit/s")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", action="store_true", help="also one training run per rate")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    rates = sorted({float(r) for r in args.rates.split(",")} | {args.ref})

    head = (f"{'rate':>6} {'idle':>7} {'loaded':>7} {'eff':>6} {'vs ref':>7} {'compute x':>9} "
            f"{'faithful':>8}")
    if args.steps:
        head += f" {'step ms':>8} {'comp ms':>8} {'comm ms':>8} {'comm x':>7}"
    print(head, flush=True)
    rows, e_ref, comm_ref = [], None, None
    with tempfile.TemporaryDirectory(prefix="faithful-") as tmp:
        for rate in rates:
            idle, loaded, slow = goodputs(rate, args.access, args.seconds, args.workers,
                                          args.batch)
            if e_ref is None:  # rates are sorted and include the reference: it comes first
                e_ref = idle / rate
            eff = loaded / rate
            row = {"rate_mbit": rate, "idle_mbit": round(idle, 1),
                   "loaded_mbit": round(loaded, 1), "efficiency": round(eff, 4),
                   "vs_ref": round(eff / e_ref, 4), "compute_x": round(slow, 3),
                   "faithful": eff >= (1 - TOLERANCE) * e_ref}
            line = (f"{rate:>6g} {idle:>7.1f} {loaded:>7.1f} {eff:>6.3f} {eff / e_ref:>7.3f} "
                    f"{slow:>9.2f} {'yes' if row['faithful'] else 'NO':>8}")
            if args.steps:
                m = training_step(rate, args.access, args.batch, Path(tmp))
                ideal = 8 * GRADIENT_BYTES / (e_ref * rate * 1e6)
                row.update({"step_ms": round(m["step_s"] * 1000, 1),
                            "compute_ms": round(m["compute_s"] * 1000, 1),
                            "comm_ms": round(m["comm_s"] * 1000, 1),
                            "comm_x": round(m["comm_s"] / ideal, 3)})
                comm_ref = comm_ref or row["comm_x"]  # the reference rate comes first
                row["faithful"] = row["faithful"] and row["comm_x"] <= (1 + TOLERANCE) * comm_ref
                line = line[:-8] + f"{'yes' if row['faithful'] else 'NO':>8}"
                line += (f" {row['step_ms']:>8.1f} {row['compute_ms']:>8.1f} "
                         f"{row['comm_ms']:>8.1f} {row['comm_x']:>7.2f}")
            rows.append(row)
            print(line, flush=True)
    faithful = 0.0
    for row in rows:
        if not row["faithful"]:
            break
        faithful = row["rate_mbit"]
    print(f"highest faithful rate (every rate up to it within {TOLERANCE:.0%} of the "
          f"reference{' (goodput and step comm)' if args.steps else ' (goodput)'}, "
          f"{args.workers} workers computing): {faithful:g} Mbit/s")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(json.dumps({"csv": str(args.csv)}))


if __name__ == "__main__":
    main()
