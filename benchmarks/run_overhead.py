"""What a run costs beyond its training time, and how fast bad input is refused.

    .venv/bin/python benchmarks/run_overhead.py [--runs N] [--no-8] [--out DIR] [--train-s S]

Prints, measured in this one invocation (needs root for the emulation parts):

1. refusing bad input: ``netsense run smoke -m bogus``, ``netsense run nosuchscenario``,
   ``netsense sweep nosuchsweep`` against ``netsense --help`` (median of 3 each);
2. per-run overhead (``wall_s`` minus rank 0's training clock) of N consecutive 2-worker
   ``smoke`` runs (allreduce) as a sweep runs them (one launcher for all), the first run
   apart (it waits for the pre-imported worker's imports) and the median of the others,
   with the per-phase breakdown from summary.json;
3. the same for one 8-worker ``scale-star8`` run, and for one 2-worker run with fresh
   worker processes (``NETSENSE_ZYGOTE=0``, the fallback path);
4. the worker's ``setup_s`` (its imports excluded) inside the emulation against the same
   worker under ``torchrun --standalone --nproc-per-node 2`` on loopback, back to back;
5. the paper-quick sweep's wall time estimated from (2) as training time + 32 x overhead,
   against the 14.5 min it took before (``results/paper-quick`` commit 3337e1f).

Targets: overhead <= 4 s (2 workers), <= 10 s (8 workers); setup_s ratio <= 1.5;
paper-quick <= 0.5x; refusal <= 1.5 s and <= 2x ``--help``. Run it under the heavy lock on
an otherwise idle machine; the numbers are printed, not asserted. ``--train-s`` shortens the
smoke runs' training (and leaves out their rate cut, which comes at 2 s): for a quick check
that the benchmark works, not for figures (the overhead does not depend on it, the paper-quick
estimate's training time does not come from it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAPER_QUICK_BEFORE_S = 14.5 * 60
PAPER_QUICK_RUNS, PAPER_QUICK_TRAIN_S = 32, 30 * 10 + 2 * 30
PHASES = ["build", "zygote_wait", "launch", "imports", "data_model", "rendezvous", "ddp", "barrier",
          "first_step", "training", "final_eval", "exit", "teardown", "other"]


def _time_cmd(argv: list[str], n: int = 3) -> tuple[float, int]:
    times, code = [], 0
    for _ in range(n):
        t = time.perf_counter()
        code = subprocess.run(argv, capture_output=True, cwd=REPO, check=False).returncode
        times.append(time.perf_counter() - t)
    return statistics.median(times), code


def refusal() -> None:
    ns = str(BIN / "netsense")
    help_s, _ = _time_cmd([ns, "--help"])
    print(f"\n## refusing bad input (median of 3; --help {help_s:.2f} s)")
    print(f"{'command':44} {'exit':>4} {'s':>6} {'x help':>7}")
    for argv in (["run", "smoke", "-m", "bogus"], ["run", "nosuchscenario"],
                 ["sweep", "nosuchsweep"]):
        s, code = _time_cmd([ns, *argv])
        print(f"{'netsense ' + ' '.join(argv):44} {code:4d} {s:6.2f} {s / help_s:7.2f}")


def _rank0(log_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    recs = [json.loads(ln) for ln in (log_dir / "rank0.jsonl").read_text()
            .splitlines() if ln.strip()]
    start = next(r for r in recs if r["kind"] == "start")
    summ = next(r for r in reversed(recs) if r["kind"] == "summary")
    return start, summ


def _scenario(name: str, train_s: float | None = None) -> Any:
    """The scenario ``name``; with ``train_s``, training that long and no timeline (smoke's
    rate cut at 2 s could not happen in a shorter run)."""
    from testbed.config.scenario import apply_overrides, load_scenario

    scn = load_scenario(name)
    if train_s is None:
        return scn
    return apply_overrides(scn, {"workload.time_limit_s": train_s, "timeline": []})


def _one_run(scenario: Any, method: str, run_dir: Path) -> dict[str, Any]:
    from testbed.orchestration.run import run_scenario

    out = run_scenario(scenario, method, 0, run_dir, progress=False)
    s = out.summary
    row: dict[str, Any] = {"status": out.status, "wall_s": s.get("wall_s"),
                           "phases": s.get("phases_s") or {}, "reason": s.get("reason"),
                           "launcher": s.get("launcher", "process")}
    try:
        start, summ = _rank0(run_dir / "workers")
        row["train_s"] = summ["train_time_s"]
        row["overhead_s"] = s["wall_s"] - summ["train_time_s"]
        row["setup_s"] = start["setup_s"]
    except (OSError, StopIteration, KeyError, ValueError):
        row.update(train_s=None, overhead_s=None, setup_s=None)
    return row


def _fmt(v: Any) -> str:
    return f"{v:10.2f}" if isinstance(v, int | float) else f"{'-':>10}"


def _print_runs(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n## {title}")
    cols = [p for p in PHASES if any(p in r["phases"] for r in rows)]
    print(f"{'run':>5} {'status':6} {'launcher':8} {'wall_s':>7} {'train_s':>7} "
          f"{'overhead':>8} " + " ".join(f"{c[:10]:>10}" for c in cols))
    for i, r in enumerate(rows):
        print(f"{i + 1:5d} {r['status']:6} {r['launcher']:8} {r['wall_s'] or 0:7.2f} "
              f"{r['train_s'] or 0:7.2f} {r['overhead_s'] or 0:8.2f} "
              + " ".join(_fmt(r["phases"].get(c)) for c in cols))
        if r["status"] != "ok":
            print(f"      reason: {r['reason']}")


def _launcher() -> Any:
    try:
        from testbed.orchestration import launcher
    except ImportError:  # the code before the zygote: nothing to share
        return contextlib.nullcontext()
    return launcher.shared()


def torchrun_setup_s(tmp: Path, smoke: Any) -> float | None:
    """rank 0's setup_s of the smoke worker under torchrun on loopback."""
    from netsenseml import methods
    from testbed.orchestration.run import worker_argv

    argv = worker_argv(smoke, methods.parse("allreduce"), 0, tmp / "torchrun")[3:]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m",
                    "workloads.train", *argv], cwd=REPO, env=env, capture_output=True,
                   check=False, timeout=300)
    try:
        return float(_rank0(tmp / "torchrun")[0]["setup_s"])
    except (OSError, StopIteration, KeyError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="consecutive 2-worker runs (default 4)")
    ap.add_argument("--no-8", action="store_true", help="skip the 8-worker run")
    ap.add_argument("--out", type=Path, default=None, help="run folders (default: temp dir)")
    ap.add_argument("--train-s", type=float, default=None,
                    help="smoke runs' training seconds, without their rate cut (default: "
                    "smoke's 4 s): a quick check, not figures")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="netsense-overhead-"))
    refusal()
    if os.geteuid() != 0:
        print("\n(emulation parts skipped: need root)")
        return 0

    smoke = _scenario("smoke", args.train_s)
    with _launcher():
        two = [_one_run(smoke, "allreduce", out / f"two-{i}") for i in range(args.runs)]
        eight = ([] if args.no_8
                 else [_one_run(_scenario("scale-star8"), "allreduce", out / "eight")])
    os.environ["NETSENSE_ZYGOTE"] = "0"  # the fallback: fresh worker processes
    fresh = _one_run(smoke, "allreduce", out / "two-fresh")
    del os.environ["NETSENSE_ZYGOTE"]
    t_setup = torchrun_setup_s(out, smoke)  # right after the emulated runs: back to back
    _print_runs(f"{args.runs} consecutive 2-worker smoke runs (allreduce, "
                f"{smoke.workload.time_limit_s:g} s training)", two)
    if eight:
        _print_runs("8-worker scale-star8 run (5 steps)", eight)
    _print_runs("2-worker smoke run with fresh worker processes (NETSENSE_ZYGOTE=0)", [fresh])

    ok = [r for r in two if r["overhead_s"] is not None]
    steady = statistics.median(r["overhead_s"] for r in ok[1:]) if len(ok) > 1 else None
    emu_setup = statistics.median(r["setup_s"] for r in ok[1:] or ok) if ok else None
    print("\n## summary (ratios measured in this invocation)")
    if ok:
        print(f"overhead 2 workers, first run        {ok[0]['overhead_s']:6.2f} s")
    if steady is not None:
        print(f"overhead 2 workers, later runs (med) {steady:6.2f} s   target <= 4 s")
    if eight and eight[0]["overhead_s"] is not None:
        print(f"overhead 8 workers                   {eight[0]['overhead_s']:6.2f} s   "
              "target <= 10 s")
    if emu_setup is not None and t_setup:
        print(f"setup_s emulation {emu_setup:.2f} s / torchrun loopback {t_setup:.2f} s = "
              f"{emu_setup / t_setup:.2f}   target <= 1.5")
    if fresh["setup_s"] is not None and t_setup:
        print(f"setup_s emulation, fresh processes {fresh['setup_s']:.2f} s / torchrun "
              f"{t_setup:.2f} s = {fresh['setup_s'] / t_setup:.2f}")
    if steady is not None:
        est = PAPER_QUICK_TRAIN_S + PAPER_QUICK_RUNS * steady
        print(f"paper-quick estimate {PAPER_QUICK_TRAIN_S} s training + {PAPER_QUICK_RUNS} x "
              f"{steady:.2f} s = {est / 60:.1f} min vs {PAPER_QUICK_BEFORE_S / 60:.1f} min "
              f"before = {est / PAPER_QUICK_BEFORE_S:.2f}   target <= 0.5")
    print(f"run folders: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
