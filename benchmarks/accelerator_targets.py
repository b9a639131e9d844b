"""The emulated accelerator's targets, measured: host independence, repeatability, dilation
invariance and scale, each as interleaved arms in one session.

    python benchmarks/accelerator_targets.py host [--repeats 5] [--scenario accel-static]
    python benchmarks/accelerator_targets.py repeat [--repeats 5] [--scenario accel-d70]
    python benchmarks/accelerator_targets.py invariance [--factors 1,2,4] [--repeats 1]
        [--scenario xover-static] [--step-ms 40]
    python benchmarks/accelerator_targets.py scale [--workers 8] [--step-ms 5]
    common: [--method fp16] [--seed 0] [--out DIR] [--native] [--set key=value ...]

* ``host``: the same run with and without one CPU-bound process beside it, run by run
  (quiet, busy, quiet, busy, ...); prints each arm's throughput and time to target, their
  ratio with a bootstrap 95 % interval, the permutation p, and both arms' overrun share and
  other load. ``--native`` runs the scenario without its accelerator (the before figure).
* ``repeat``: the same run N times: max/min throughput, the step at which the target was
  reached, the 95 % interval of the mean (and its half-width in % of the mean), and what
  the spread comes with: the job's TCP retransmissions (TCP_INFO, per step) and its
  retransmission timeouts (the worker hosts' TCPTimeouts).
* ``invariance``: the scenario under a given step time (``--step-ms``, a profile this host
  keeps up with at k = 1) at each factor k, interleaved: virtual throughput and time to
  target per k against k = 1 (static: within 5 %; congested: within the repeats' interval).
* ``scale``: N workers on a star, every access link 1 Gbit/s virtual, one cycle of the d70
  timeline (xover-star4-d70's shape, 1.5 s virtual): the overrun share and the factor
  ``auto`` picked.

Run it under the heavy lock on an otherwise idle machine (``flock /tmp/netsense-heavy.lock``);
the figures are printed, not asserted. Needs root (real emulated networks).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.cli.common import parse_overrides  # noqa: E402
from testbed.common import stats  # noqa: E402
from testbed.config.scenario import apply_overrides, load_scenario  # noqa: E402
from testbed.orchestration.run import run_scenario  # noqa: E402

HOG = "while True: pass"


class Hog:
    """One CPU-bound process beside the run (started and killed by PID)."""

    def __enter__(self) -> Hog:
        self.proc = subprocess.Popen([sys.executable, "-c", HOG])
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def run_once(scn: Any, method: str, seed: int, folder: Path) -> dict[str, Any]:
    """One run; the figures this benchmark reports from its folder."""
    out = run_scenario(scn, method, seed, folder, progress=False)
    s = out.summary
    row: dict[str, Any] = {
        "status": out.status, "reason": s.get("reason"),
        "throughput": s.get("throughput_samples_per_s"), "tta": s.get("time_to_accuracy_s"),
        "overrun": (s.get("overruns") or {}).get("share"), "degraded": bool(s.get("degraded")),
        "other_pct": (s.get("host_load") or {}).get("other_mean_pct"), "wall_s": s.get("wall_s"),
        "k": json.loads((out.run_dir / "config.json").read_text()).get(
            "accelerator", {}).get("dilation", 1.0),
    }
    tcp = (s.get("network") or {}).get("tcp") or []
    row["timeouts"] = sum(r.get("TCPTimeouts", 0) for r in tcp)
    row["retrans_segs"] = sum(r.get("RetransSegs", 0) for r in tcp)
    steps = _rank0(out.run_dir)
    row["retrans_tcpinfo"] = sum(int(float(r.get("tcp_retrans") or 0)) for r in steps)
    target = scn.workload.target_accuracy
    row["target_step"] = next((int(r["step"]) for r in steps
                               if r.get("accuracy") and target is not None
                               and float(r["accuracy"]) >= target), None)
    return row


def _rank0(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "steps.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["rank"] == "0"]


def interleaved(arms: dict[str, Callable[[int], dict[str, Any]]], repeats: int
                ) -> dict[str, list[dict[str, Any]]]:
    """Every arm once per repeat, the order alternating (A B, B A, ...)."""
    names = list(arms)
    out: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for i in range(repeats):
        for name in (names if i % 2 == 0 else names[::-1]):
            t = time.monotonic()
            row = arms[name](i)
            out[name].append(row)
            print(f"  [{i + 1}/{repeats}] {name}: {row['status']} "
                  f"{_f(row['throughput'], '.0f')} samples/s, TTA {_f(row['tta'], '.4f')} s, "
                  f"overrun {_f(row['overrun'], '.3f')}, other load {_f(row['other_pct'], '.0f')} %, "
                  f"k {row['k']:g}, {time.monotonic() - t:.0f} s", flush=True)
    return out


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def describe(name: str, rows: list[dict[str, Any]], key: str = "throughput") -> list[float]:
    ok = [r for r in rows if r["status"] == "ok"]
    vals = [r[key] for r in ok if r[key] is not None]
    ci = stats.ci95(vals)
    spread = max(vals) / min(vals) if vals and min(vals) > 0 else float("nan")
    print(f"{name:>14} {key}: n={len(vals)} mean {ci.mean:.4g} +- {ci.half:.3g} "
          f"({100 * ci.half / ci.mean if ci.mean else float('nan'):.1f} %), max/min {spread:.3f}, "
          f"values {[round(v, 4) for v in vals]}")
    if len(ok) < len(rows):
        print(f"{'':>14} not ok: {[r['reason'] for r in rows if r['status'] != 'ok']}")
    return vals


def ratio_line(label: str, a: list[float], b: list[float]) -> None:
    r = stats.bootstrap_ratio(a, b)
    p = stats.permutation_p(a, b)
    print(f"{label}: ratio of means {r.ratio:.3f} [{r.lo:.3f}, {r.hi:.3f}] (bootstrap 95 %), "
          f"permutation p {p:.3g}")


def scenario(args: argparse.Namespace, name: str | None = None, extra: dict | None = None) -> Any:
    scn = load_scenario(name or args.scenario)
    over = {**parse_overrides(args.set), **(extra or {})}
    if args.native:
        over["accelerator"] = None
    return apply_overrides(scn, over) if over else scn


def cmd_host(args: argparse.Namespace, out: Path) -> None:
    scn = scenario(args)

    def arm(hog: bool) -> Callable[[int], dict[str, Any]]:
        def go(i: int) -> dict[str, Any]:
            folder = out / ("busy" if hog else "quiet") / f"r{i}"
            if hog:
                with Hog():
                    return run_once(scn, args.method, args.seed, folder)
            return run_once(scn, args.method, args.seed, folder)
        return go

    res = interleaved({"quiet": arm(False), "busy": arm(True)}, args.repeats)
    print(f"# host independence: {scn.name} {args.method} seed {args.seed}, "
          f"{'native' if args.native else 'paced'}")
    q, b = describe("quiet", res["quiet"]), describe("busy", res["busy"])
    describe("quiet", res["quiet"], "tta")
    describe("busy", res["busy"], "tta")
    ratio_line("busy / quiet throughput", b, q)
    for name in ("quiet", "busy"):
        rows = res[name]
        print(f"{name:>14} overrun share {[r['overrun'] for r in rows]}, other load % "
              f"{[r['other_pct'] for r in rows]}, degraded {sum(r['degraded'] for r in rows)}")


def cmd_repeat(args: argparse.Namespace, out: Path) -> None:
    scn = scenario(args)
    res = interleaved({"run": lambda i: run_once(scn, args.method, args.seed, out / f"r{i}")},
                      args.repeats)["run"]
    print(f"# repeatability: {scn.name} {args.method} seed {args.seed}")
    describe("run", res)
    describe("run", res, "tta")
    print(f"{'':>14} step at target {[r['target_step'] for r in res]}")
    print(f"{'':>14} retransmitted segments (TCP_INFO, rank 0) {[r['retrans_tcpinfo'] for r in res]}")
    print(f"{'':>14} retransmitted segments / timeouts (worker hosts) "
          f"{[(r['retrans_segs'], r['timeouts']) for r in res]}")
    tta = [r["tta"] for r in res if r["tta"] is not None]
    to = [r["timeouts"] for r in res if r["tta"] is not None]
    if len(tta) >= 3 and len(set(to)) > 1:
        print(f"{'':>14} TTA vs timeouts: Pearson r {statistics.correlation(tta, to):.2f}")


def cmd_invariance(args: argparse.Namespace, out: Path) -> None:
    factors = [float(k) for k in args.factors.split(",")]
    arms = {}
    for k in factors:
        scn = scenario(args, extra={"accelerator": {"step_ms": args.step_ms, "dilation": k}})

        def go(i: int, scn: Any = scn, k: float = k) -> dict[str, Any]:
            return run_once(scn, args.method, args.seed, out / f"k{k:g}" / f"r{i}")
        arms[f"k={k:g}"] = go
    res = interleaved(arms, args.repeats)
    print(f"# dilation invariance: {args.scenario} step {args.step_ms:g} ms, {args.method}")
    base = None
    for name, rows in res.items():
        thr = describe(name, rows)
        describe(name, rows, "tta")
        if base is None:
            base = thr
        elif thr and base:
            print(f"{'':>14} throughput vs k={factors[0]:g}: "
                  f"{statistics.mean(thr) / statistics.mean(base):.3f}")


def cmd_scale(args: argparse.Namespace, out: Path) -> None:
    # xover-star4-d70's first cycle (w0's access link congested 70 % of it by 8 iperf3
    # streams into w0), time-limited: to the target it would take hours of real time at 8
    # workers (a congested 8-worker ring step is ~0.7 s virtual, ~40 s real)
    scn = load_scenario("xover-star4-d70")
    over = {"topology.n_workers": args.workers, "topology.rate_mbit": 1000,
            "accelerator": {"step_ms": args.step_ms, "dilation": "auto"},
            "workload.time_limit_s": 1.5, "workload.args": {"width": 512},
            "timeline": [
                {"at_s": 0.3, "kind": "set_rate", "link": "w0", "rate_mbit": 200},
                {"at_s": 0.3, "kind": "cross_start", "id": "c1", "src": "x0", "dst": "w0",
                 "streams": 8},
                {"at_s": 1.2, "kind": "cross_stop", "id": "c1"},
                {"at_s": 1.2, "kind": "set_rate", "link": "w0", "rate_mbit": 1000}],
            **parse_overrides(args.set)}
    scn = apply_overrides(scn, over)
    row = run_once(scn, args.method, args.seed, out / f"w{args.workers}")
    print(f"# scale: {args.workers} workers, 1 Gbit/s virtual access links, one d70 cycle "
          f"(1.5 s virtual), step {args.step_ms:g} ms: {row}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("host", "repeat", "invariance", "scale"))
    p.add_argument("--scenario", default=None)
    p.add_argument("--method", default="fp16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--factors", default="1,2,4")
    p.add_argument("--step-ms", type=float, default=40.0)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--native", action="store_true")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    args.scenario = args.scenario or {"host": "accel-static", "repeat": "accel-d70",
                                      "invariance": "xover-static", "scale": "xover-star4-d70"}[args.what]
    if args.what == "invariance" and args.repeats == 5:
        args.repeats = 1
    out = args.out or Path(tempfile.mkdtemp(prefix=f"accel-{args.what}-"))
    print(f"# run folders: {out}", flush=True)
    {"host": cmd_host, "repeat": cmd_repeat, "invariance": cmd_invariance,
     "scale": cmd_scale}[args.what](args, out)


if __name__ == "__main__":
    main()
