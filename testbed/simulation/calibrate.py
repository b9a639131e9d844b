"""Calibrating the step model from run folders, and its prediction error on other runs.

From each run folder (config.json, steps.csv, summary.json) the per-step means of all ranks'
rows, leaving out each rank's first ``WARMUP_STEPS`` steps (rendezvous, bucket set-up, first
touches): compute_s, codec_s, comm_s, step_s and bytes_sent (the payload handed to
torch.distributed per worker and step). The collective comes from the method registry
(``reduction``: allreduce or allgather).

``fit_link`` solves ``comm_s = alpha x L + (1/eta) x V x 8 / R`` by relative least squares
(alpha >= 0, eta <= 1) over the calibration runs (linear in alpha and 1/eta; needs runs whose L/V ratios differ, e.g. one
allreduce and one allgather method). ``validate`` then predicts every other run from the
calibration run of the same method (its payload, compute and codec per worker) and the
target run's worker count, and returns one row per run with the relative errors.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netsenseml import methods
from testbed.simulation.model import (
    FlowModel,
    LinkCalibration,
    StepInput,
    oversubscription,
    volume_and_messages,
)

WARMUP_STEPS = 2


@dataclass(frozen=True)
class RunStats:
    path: Path
    method: str
    collective: str
    n: int
    rate_mbit: float
    batch_size: int
    steps: int
    compute_s: float
    codec_s: float
    comm_s: float
    step_s: float
    payload_bytes: float
    throughput: float  # global samples/s, summary.json's (same definition as the tables)


def _collective(method: str) -> str:
    red = methods.parse(method).info.reduction
    if red not in ("allreduce", "allgather"):
        raise ValueError(f"method {method!r}: no fixed collective ({red}); the model needs "
                         "allreduce or allgather methods")
    return red


def _mean(rows: list[dict[str, str]], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return sum(vals) / len(vals) if vals else 0.0


def load_run(run_dir: Path) -> RunStats | None:
    """The step means of one ok run on a star topology, or None (not usable here)."""
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        summ = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    topo = (cfg.get("scenario") or {}).get("topology") or {}
    if summ.get("status") != "ok" or topo.get("kind") != "star" or topo.get("n_cross", 0):
        return None
    with open(run_dir / "steps.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh)
                if r.get("step") not in (None, "") and int(r["step"]) > WARMUP_STEPS]
    if not rows:
        return None
    method = cfg["method"]
    return RunStats(
        path=run_dir, method=method, collective=_collective(method),
        n=int(cfg["world_size"]), rate_mbit=float(topo["rate_mbit"]),
        batch_size=int(cfg["scenario"]["workload"]["batch_size"]),
        steps=len({r["step"] for r in rows}),
        compute_s=_mean(rows, "compute_s"), codec_s=_mean(rows, "codec_s"),
        comm_s=_mean(rows, "comm_s"), step_s=_mean(rows, "step_s"),
        payload_bytes=_mean(rows, "bytes_sent"),
        throughput=float(summ.get("throughput_samples_per_s") or math.nan),
    )


def load_runs(root: Path) -> list[RunStats]:
    out = []
    for s in sorted(Path(root).rglob("summary.json")):
        st = load_run(s.parent)
        if st is not None:
            out.append(st)
    return out


def fit_link(runs: list[RunStats]) -> LinkCalibration:
    """Least-squares alpha and eta from the runs' mean comm_s (alpha >= 0, 0 < eta <= 1)."""
    a, y = [], []
    for r in runs:
        vol, msgs = volume_and_messages(r.collective, r.n, r.payload_bytes)
        a.append([msgs, vol * 8.0 / (r.rate_mbit * 1e6)])
        y.append(r.comm_s)
    if len(a) < 2:
        raise ValueError("calibration: need at least 2 runs (e.g. allreduce and topk at n=2)")
    # relative least squares (each row divided by its measurement): the prediction error that
    # matters is relative, and comm times span two orders of magnitude across methods
    w = 1.0 / np.maximum(np.array(y), 1e-6)
    am, ym = np.array(a) * w[:, None], np.array(y) * w
    (alpha, inv_eta), *_ = np.linalg.lstsq(am, ym, rcond=None)
    if alpha < 0 or inv_eta < 1:  # outside the physical box: best fit on its boundary
        cands = []
        inv = max(1.0, float(am[:, 1] @ ym / max(1e-30, am[:, 1] @ am[:, 1])))
        cands.append((0.0, inv))  # alpha = 0, best 1/eta
        al = max(0.0, float(am[:, 0] @ (ym - am[:, 1]) / max(1e-30, am[:, 0] @ am[:, 0])))
        cands.append((al, 1.0))  # eta = 1, best alpha
        alpha, inv_eta = min(cands, key=lambda c: float(
            np.sum((am @ np.array(c) - ym) ** 2)))
    return LinkCalibration(alpha_s=float(alpha), eta=float(1.0 / inv_eta))


def step_input(base: RunStats, n: int, cores: int | None, competing: int = 0) -> StepInput:
    """A prediction's input: ``base``'s method, payload, compute and codec at ``n`` workers.

    The base run's compute is divided by its own oversubscription so that it is the
    uncontended per-worker compute.
    """
    f = oversubscription(base.n, cores)
    return StepInput(n=n, collective=base.collective, payload_bytes=base.payload_bytes,
                     rate_mbit=base.rate_mbit, compute_s=base.compute_s / f,
                     codec_s=base.codec_s / f, competing=competing, cores=cores,
                     batch_size=base.batch_size)


def validate(runs: list[RunStats], calib_n: int = 2, cores: int | None = None
             ) -> tuple[LinkCalibration, list[dict[str, Any]]]:
    """Calibrate on the ``calib_n``-worker runs, predict all runs; one row per run."""
    calib = [r for r in runs if r.n == calib_n]
    link = fit_link(calib)
    model = FlowModel(link)
    base = {r.method: r for r in calib}
    rows = []
    for r in sorted(runs, key=lambda r: (r.method, r.n)):
        if r.method not in base:
            continue
        x = step_input(base[r.method], r.n, cores)
        p = model.predict(x)
        thr = model.throughput(x)
        rows.append({
            "method": r.method, "collective": r.collective, "workers": r.n,
            "role": "calibration" if r.n == calib_n else "prediction",
            "payload_kB": round(r.payload_bytes / 1e3, 1),
            "comm_meas_s": r.comm_s, "comm_pred_s": p.comm_s,
            "step_meas_s": r.step_s, "step_pred_s": p.step_s,
            "step_err_pct": 100.0 * (p.step_s - r.step_s) / r.step_s,
            "thr_meas": r.throughput, "thr_pred": thr,
            "thr_err_pct": 100.0 * (thr - r.throughput) / r.throughput,
        })
    return link, rows


def scale_rows(runs: list[RunStats], link: LinkCalibration, sizes: list[int],
               calib_n: int = 2) -> list[dict[str, Any]]:
    """Predicted step time and throughput at larger worker counts (one machine per worker)."""
    model = FlowModel(link)
    rows = []
    for r in sorted((r for r in runs if r.n == calib_n), key=lambda r: r.method):
        for n in sizes:
            x = step_input(r, n, None)
            p = model.predict(x)
            rows.append({"method": r.method, "workers": n, "comm_s": p.comm_s,
                         "step_s": p.step_s, "thr": model.throughput(x)})
    return rows
