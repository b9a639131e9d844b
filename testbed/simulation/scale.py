"""Prediction at scale: a scenario's workload and methods on W workers of a bigger fabric.

``predict`` simulates, for every method and worker count, ``steps`` steps of the job on the
chosen fabric (``fabric_for``: by default a fat-tree of the scenario's access rate with
over-subscribed leaf uplinks and another job's bulk flows through them), with the
calibration's network factors and compute (one machine per worker: no CPU sharing), and
returns one row per (method, W): step time, communication, throughput, NetSenseML's
levels, and time to accuracy.

Time to accuracy = steps to the target x the predicted step time. The steps are plain
allreduce's steps to the target times the convergence prior's factor ``c(d)``
(``netsenseml.convergence``, the table the policy itself plans with) of the level each
step sent, averaged over the steps: a fixed method's own level, NetSenseML's chosen ones.
Allreduce's steps come from the job's convergence table (``netsense convergence``) where one
is given, else from a stated number (the caller's ``default_base_steps``, with the default
prior's factors); the table is measured at one global batch, and the prediction keeps its
steps at every W (the number of steps taken as independent of W: beyond the critical batch
size more workers do not cut steps), so TTA compares methods at one W and shows how the
step time, not the statistics, scales.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from netsenseml import convergence
from testbed.simulation.calibrate import Calibration, compute_table, summarise
from testbed.simulation.platform import Fabric
from testbed.simulation.sim import CrossFlow, Job, simulate_isolated

FABRICS = ("fattree", "dragonfly", "scenario")


def fabric_for(topo: dict[str, Any], workers: int, kind: str = "fattree", *,
               hosts_per_leaf: int = 16, workers_per_leaf: int = 8, oversub: float = 4.0,
               background: int = 4) -> Fabric:
    """The fabric of a prediction: the scenario's own topology grown to ``workers``
    (``kind="scenario"``, star/dumbbell/leafspine), or a fat-tree / dragonfly whose links
    run at the scenario's access rate."""
    rate = float(topo.get("rate_mbit") or topo.get("access_mbit") or 1000.0)
    if kind == "scenario":
        k = topo.get("kind")
        if k == "star":
            return Fabric("star", workers, rate, cross=int(topo.get("n_cross", 0)),
                          queue_pkts=int(topo.get("queue_pkts", 100)))
        if k == "dumbbell":
            return Fabric("dumbbell", workers, rate, cross=int(topo.get("n_cross", 0)),
                          bottleneck_mbit=float(topo["bottleneck_mbit"]),
                          n_left=workers // 2, queue_pkts=int(topo.get("queue_pkts", 100)))
        if k == "leafspine":
            return Fabric("leafspine", workers, rate, leaves=int(topo["leaves"]),
                          spines=int(topo["spines"]),
                          uplink_mbit=float(topo.get("uplink_mbit") or 100.0))
        raise ValueError(f"fabric: scenario topology {k!r} cannot be simulated; "
                         f"allowed: star, dumbbell, leafspine, or --fabric fattree|dragonfly")
    if kind not in ("fattree", "dragonfly"):
        raise ValueError(f"fabric: unknown {kind!r}; allowed: {', '.join(FABRICS)}")
    return Fabric(kind, workers, rate, hosts_per_leaf=hosts_per_leaf,
                  workers_per_leaf=workers_per_leaf, oversub=oversub, background=background,
                  queue_pkts=int(topo.get("queue_pkts", 100)))


def base_steps(convergence_path: str | None, default: float) -> float:
    """Plain allreduce's steps to the target: the convergence table's ``none`` level (its
    seeds' mean) where a table is given, else ``default`` (stated by the caller)."""
    if not convergence_path:
        return float(default)
    data = json.loads(Path(convergence_path).read_text())
    row = (data.get("levels") or {}).get("none") or (data.get("levels") or {}).get("allreduce")
    vals = [v if v is not None else data.get("max_steps") for v in (row or {}).get("steps", [])]
    vals = [float(v) for v in vals if isinstance(v, int | float)]
    return statistics.fmean(vals) if vals else float(default)


def steps_to_target(prior: convergence.Prior, base: float, levels: dict[str, int]) -> float:
    """``base`` x the prior's factor ``c(d)``, averaged over the levels the steps sent."""
    total = sum(levels.values())
    if not total:
        return math.nan
    factor = 0.0
    for key, count in levels.items():
        level, _, r = key.partition(":")
        factor += count * prior.factor(level, float(r) if r else 1.0)
    return base * factor / total


def predict(cal: Calibration, topology: dict[str, Any], methods: list[str],
            workers: list[int], *, fabric: str = "fattree", steps: int = 30,
            parallel: int = 2, fabric_options: dict[str, Any] | None = None,
            cross: tuple[CrossFlow, ...] = (), convergence_path: str | None = None,
            default_base_steps: float = 1000.0) -> list[dict[str, Any]]:
    """One row per (method, W), each simulation in its own process; ``topology`` is the
    scenario's (its access rate, and its own shape for ``fabric="scenario"``)."""
    prior = convergence.load(convergence_path)
    base = base_steps(convergence_path, default_base_steps)
    wl = cal.workload
    jobs, keys = [], []
    for m in methods:
        for w in workers:
            fab = fabric_for(topology, w, fabric, **(fabric_options or {}))
            jobs.append(Job(fabric=fab, method=m, dense_bytes=wl["dense_bytes"],
                            batch_size=int(wl["batch_size"]),
                            compute=compute_table(cal, "idle", m), cal=cal.net,
                            topk_bytes_per_element=wl["topk_bytes_per_element"],
                            cross=cross if fab.kind in ("star", "dumbbell", "leafspine")
                            else (), cores=None,
                            htb=fab.kind in ("star", "dumbbell", "leafspine"),
                            steps=steps, extrapolate=w > 16, convergence=convergence_path))
            keys.append((m, w))
    results = simulate_isolated(jobs, parallel)
    rows = []
    for (m, w), job, res in zip(keys, jobs, results, strict=True):
        p = summarise(res, w, job.batch_size)
        n_steps = steps_to_target(prior, base, p.levels)
        rows.append({
            "method": m, "workers": w, "fabric": job.fabric.kind,
            "step_s": round(p.step_s, 5), "comm_s": round(p.comm_s, 5),
            "compute_s": round(p.compute_s, 5),
            "throughput": round(p.throughput, 1),
            "steps_to_target": round(n_steps, 1),
            "tta_s": round(n_steps * p.step_s, 2),
            "level": max(p.levels, key=lambda k: p.levels[k]) if p.levels else "",
            "levels": " ".join(f"{k}:{v}" for k, v in sorted(p.levels.items())),
            "sim_wall_s": round(p.wall_s, 3),
        })
    return rows


def markdown(rows: list[dict[str, Any]], cols: list[str]) -> str:
    """A markdown table of ``cols`` (4 significant digits; empty for None)."""

    def fmt(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)
