"""Writes the committed fixture results tree ``tests/analysis/data/results`` (run folders
as the orchestrator writes them, numbers made up but shaped like a real sweep): the tests of
the tables, figures, report, compare and pack read it without root and without Mininet.

Regenerate (deterministic): ``python tests/analysis/make_fixture.py``.

The tree (sweep ``fx``; one run folder per experiment x rate x method x seed):

- ``static`` (kind throughput): 50 / 200 / 1000 Mbit/s x allreduce, fp16, topk-0.01,
  netsenseml x seeds 0, 1; 20 steps, no target reached; the scenario names the convergence
  table ``convergence.json`` (beside each config.json), so the crossover can be drawn;
- ``static-tta`` (kind tta): 50 / 1000 Mbit/s x fp16, topk-0.01, netsenseml x seeds 0-2,
  trained to the target 0.9;
- ``onoff`` (kind timeline): 500 Mbit/s, three sequential cross-traffic flows (8 streams
  each, ~450 Mbit/s each), allreduce, fp16, netsenseml x seeds 0, 1; bottleneck.csv;
- sweep ``fxacc``, ``paced`` (kind tta): 200 Mbit/s under the emulated accelerator
  (``accelerator`` mode paced, dilation 4, profile ``a100-mlp``) x fp16, netsenseml x seeds
  0-2; ``overruns``, ``host_load`` and host.csv; netsenseml seed 2 is ``degraded``.
"""

from __future__ import annotations

import csv
import json
import math
import random
import shutil
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "results"
GRAD_BYTES = 2_200_000
WIRE = {"allreduce": 1.0, "fp16": 0.5, "int8": 0.25, "topk-0.01": 0.02}
STEPS_TO = {"none": 220, "fp16": 240, "int8": 300, "topk-0.01": 520}
COMPUTE_S = 0.06
BATCH = 256


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _csv(path: Path, rows: list[dict], cols: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})


STEP_COLS = ["rank", "t", "wall", "step", "samples", "compute_s", "comm_s", "step_s",
             "bytes_sent", "kept_ratio", "level", "loss", "accuracy", "t_worker"]


def _level(method: str, rate: float, streams: int) -> str:
    if method != "netsenseml":
        return "none" if method == "allreduce" else method
    share = rate / (1 + streams)
    return "none" if share >= 700 else ("fp16" if share >= 120 else "topk-0.01")


def run(sweep: str, exp: str, kind: str, rate: float, method: str, seed: int, *,
        n_steps: int, target: float, events: list[tuple[float, str, str, float]] = (),
        accel: dict | None = None, degraded: str | None = None, minute: int = 0) -> None:
    rnd = random.Random(f"{exp}{rate}{method}{seed}")
    d = OUT / sweep / exp / f"rate_mbit={rate:g}" / f"{method}-s{seed}"
    topo = {"kind": "dumbbell", "n_left": 1, "n_right": 1, "n_cross": 2 if events else 0,
            "bottleneck_mbit": rate, "access_mbit": 10000, "queue_pkts": 100}
    scenario = {"name": exp, "topology": topo,
                "workload": {"model": "mlp", "dataset": "mixture", "batch_size": BATCH,
                             "target_accuracy": target, "eval_every": 10,
                             "args": {"width": 512}}}
    if kind == "throughput":
        scenario["convergence"] = "convergence.json"
        _w(d / "convergence.json", json.dumps({
            "format": "netsense-convergence/1", "world_size": 2, "max_steps": 1500,
            "levels": {lv: {"steps": [n, n + 20]} for lv, n in STEPS_TO.items()}}, indent=1))
    cfg = {"scenario": scenario, "method": method, "seed": seed, "world_size": 2,
           "started_at": f"2026-12-06T07:{minute // 60:02d}:{minute % 60:02d}+00:00",
           "versions": {"python": "3.11.2", "torch": "2.5.1"}}
    if accel is not None:
        cfg["accelerator"] = accel
    _w(d / "config.json", json.dumps(cfg, indent=1))
    _w(d / "sweep.json", json.dumps({"sweep": sweep, "experiment": exp, "kind": kind,
                                     "params": {"rate_mbit": rate}}))
    rows, t, acc, streams, reached_at = [], 0.5, 0.3, 0, None
    ev = sorted(events)
    speed = {"allreduce": 1.0, "fp16": 0.95, "topk-0.01": 0.45, "netsenseml": 0.9}[method]
    for step in range(1, n_steps + 1):
        streams = sum(s for at, k, _, s in ev if k == "cross_start" and at <= t - 0.5) - \
            sum(8 for at, k, _, _ in ev if k == "cross_stop" and at <= t - 0.5)
        lv = _level(method, rate, streams)
        wire = WIRE.get("allreduce" if lv == "none" else lv, 1.0)
        share = rate / (1 + streams)
        comm = GRAD_BYTES * wire * 8 / (share * 1e6) * (1 + 0.05 * rnd.random())
        comp = COMPUTE_S * (1 + 0.1 * rnd.random())
        st = comp + comm
        t += st
        acc = min(0.97, acc + speed * 0.0075 * (1 + 0.3 * (rnd.random() - 0.5)) * (1 - acc) * 4)
        evaluated = step % 10 == 0
        if evaluated and acc >= target and reached_at is None:
            reached_at = step
        for rank in (0, 1):
            rows.append({"rank": rank, "t": round(t, 4), "wall": round(1796540000 + t, 3),
                         "step": step, "samples": BATCH, "compute_s": round(comp, 5),
                         "comm_s": round(comm, 5), "step_s": round(st, 5),
                         "bytes_sent": int(GRAD_BYTES * wire),
                         "kept_ratio": 0.01 if lv == "topk-0.01" else 1.0, "level": lv,
                         "loss": round(2.0 * (1 - acc) + 0.05, 4),
                         "accuracy": round(acc, 4) if evaluated else "",
                         "t_worker": round(t - 0.5, 4)})
            if accel is not None:
                rows[-1]["pace_overrun"] = int(degraded is not None and step % 3 == 0
                                               or step == 7)
                rows[-1]["pace_late_s"] = 0.004 if rows[-1]["pace_overrun"] else 0.0
        if reached_at is not None and kind == "tta":
            break
    cols = STEP_COLS + (["pace_overrun", "pace_late_s"] if accel is not None else [])
    _csv(d / "steps.csv", rows, cols)
    evrows = [{"t_scheduled": at + 0.5, "t_applied": round(at + 0.52, 3), "kind": k,
               "target": gid, "value": s, "detail": ""} for at, k, gid, s in ev]
    _csv(d / "events.csv", evrows, ["t_scheduled", "t_applied", "kind", "target", "value",
                                    "detail"])
    summary = {"status": "ok", "method": method, "steps": n_steps,
               "finished_at": cfg["started_at"].replace("07:", "08:", 1),
               "throughput_samples_per_s": None, "bytes_sent_total": int(
                   sum(r["bytes_sent"] for r in rows))}
    if ev:
        flows = [(at, gid) for at, k, gid, _ in ev if k == "cross_start"]
        summary["network"] = {"cross_traffic": [
            {"id": gid, "src": "x0", "dst": "x1", "streams": 8, "seconds": 3.0,
             "achieved_mbit": round(450 + 10 * rnd.random(), 3),
             "received_mbit": round(440 + 10 * rnd.random(), 3),
             "intervals": [[0.0, 1.0, 455.0], [1.0, 2.0, 449.0], [2.0, 3.0, 451.0]]}
            for _, gid in flows], "bytes": {"status": "ok", "ranks": []}}
        bt = [{"t": round(0.1 * i, 2), "link": "bottleneck", "dev": "s1-eth2",
               "toward": "right", "configured_mbit": rate,
               "delivered_mbit": rate * 0.9, "backlog_pkts": (60 if any(
                   a <= 0.1 * i < a + 3 for a, k, _, _ in ev if k == "cross_start") else 2)}
              for i in range(int(t * 10))]
        _csv(d / "bottleneck.csv", bt, list(bt[0]))
    if accel is not None:
        over = sum(1 for r in rows if r["pace_overrun"] and r["step"] > 1)
        n = sum(1 for r in rows if r["step"] > 1)
        summary["overruns"] = {"steps": over, "of": n, "share": round(over / n, 5),
                               "per_rank": [over // 2, over - over // 2],
                               "late_s_max": 0.004}
        other = 35.0 if degraded else 4.0 + seed
        summary["host_load"] = {"busy_mean_pct": 80.0, "other_mean_pct": other,
                                "other_p90_pct": other + 6, "cores": 2}
        _csv(d / "host.csv", [{"t": round(0.5 * i, 1), "busy_pct": 80.0, "run_pct": 80 - other,
                               "other_pct": other, "load1": 1.5} for i in range(int(t * 2))],
             ["t", "busy_pct", "run_pct", "other_pct", "load1"])
        if degraded:
            summary["degraded"] = degraded
            summary.setdefault("warnings", []).append(degraded)
    _w(d / "summary.json", json.dumps(summary, indent=1))
    (d / "workers").mkdir(exist_ok=True)
    _w(d / "workers" / "rank0.log", "worker log (left out of a packed copy)\n")
    _w(d / "workers" / "rank0.jsonl", json.dumps({"kind": "start", "grad_bytes": GRAD_BYTES})
       + "\n")


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    minute = 0
    for rate in (50, 200, 1000):
        for m in ("allreduce", "fp16", "topk-0.01", "netsenseml"):
            for seed in (0, 1):
                minute += 1
                run("fx", "static", "throughput", rate, m, seed, n_steps=20, target=0.99,
                    minute=minute)
    for rate in (50, 1000):
        for m in ("fp16", "topk-0.01", "netsenseml"):
            for seed in (0, 1, 2):
                minute += 1
                run("fx", "static-tta", "tta", rate, m, seed, n_steps=400, target=0.9,
                    minute=minute)
    onoff = [(1.0, "cross_start", "on1", 8), (4.0, "cross_stop", "on1", math.nan),
             (7.0, "cross_start", "on2", 8), (10.0, "cross_stop", "on2", math.nan),
             (13.0, "cross_start", "on3", 8), (16.0, "cross_stop", "on3", math.nan)]
    for m in ("allreduce", "fp16", "netsenseml"):
        for seed in (0, 1):
            minute += 1
            run("fx", "onoff", "timeline", 500, m, seed, n_steps=200, target=0.99,
                events=onoff, minute=minute)
    accel = {"mode": "paced", "dilation": 4.0, "profile": "a100-mlp", "step_ms": None,
             "timing": {"forward_s": 0.002, "backward_s": 0.004, "optimizer_s": 0.0005},
             "dilation_source": "given"}
    for m in ("fp16", "netsenseml"):
        for seed in (0, 1, 2):
            minute += 1
            deg = ("the host did not keep up with the emulated accelerator: 33.3 % of steps "
                   "overran (max 10 %); raise accelerator.dilation"
                   if (m, seed) == ("netsenseml", 2) else None)
            run("fxacc", "paced", "tta", 200, m, seed, n_steps=400, target=0.9, accel=accel,
                degraded=deg, minute=minute)


if __name__ == "__main__":
    main()
