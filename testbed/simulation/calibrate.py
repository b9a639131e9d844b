"""From run folders to SimGrid: the runs' facts, the calibration, and the prediction error.

``load_run`` reads what one emulated run was (topology, method, workers, the timeline's
cross traffic, the machine's CPUs) and what it measured (per-step means over all ranks,
leaving out each rank's first ``WARMUP_STEPS`` steps and, under cross traffic, the steps
before its first stream started; and summary.json's throughput). ``job_for`` turns such a
run into the ``sim.Job`` that replays it in SimGrid.

``calibrate`` fits, from calibration runs only:

* each level's compute seconds (forward, backward and codec; steps.csv's ``compute_s``
  holds the codec too) and how much of it n ranks on fewer cores stretch (``fit_compute``:
  the runs at two worker counts give the uncontended seconds and the contention share),
  for the mean rank and, apart, for each step's last rank (the one the ring waits for);
* SimGrid's ``network/bandwidth-factor`` and ``network/latency-factor``, the per-message
  CPU seconds, the standing queue's share, the iperf3 streams' weight against the
  ring and the short messages' extra wait (``sim.NetCalibration``), by minimising the
  squared relative error of the simulated mean step time over the calibration runs on a grid, coordinate by coordinate (each
  point: every calibration run simulated once, each in its own process).

The calibration runs are of other worker counts and another seed than the validated ones
(``testbed/sweeps/sim-calibrate.yaml``), so a validation error is a prediction error.

``validate`` then simulates every other run with that calibration and returns one row
per point (its seeds averaged: the mean is the ground truth, the seeds' spread stands
beside the error): measured and predicted comm, step time and throughput, and the
relative errors.

``measured_queue`` (both; off by default): a congested run is replayed with the standing
backlog its own bottleneck.csv measured (``RunFacts.queue_fill``), and the fit learns what
share of that backlog a ring message waits behind (storing the calibration runs' median
fill for runs not made). The backlog is mostly one draw of iperf3's window autotuning
(150-560 kB toward the same link in runs of one scenario), but it also holds the ring's
own queued bytes (~200 kB in the top-k 1 % runs, up to 560 kB with allreduce), so a
replay with it is not a prediction: it says how much of a point's error is its seeds'
draw of the backlog. The committed fit is made without it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from netsenseml import methods
from testbed.analysis import loading
from testbed.common.files import write_json
from testbed.simulation.model import oversubscription
from testbed.simulation.platform import Fabric
from testbed.simulation.sim import (
    FRAME_BYTES,
    Compute,
    CrossFlow,
    Job,
    NetCalibration,
    SimResult,
    StepRecord,
    level_of,
    simulate_isolated,
)

FORMAT = "netsense-simcal/1"
WARMUP_STEPS = 2
CALIB_STEPS = 40  # simulated steps per calibration run: the step means are steady by then
#: The coordinate search's grids (value ranges a gloo ring on veth can have), in two
#: stages: the idle runs fix the ring's own costs, then the congested runs the cross
#: traffic's, so that the congested runs' large run-to-run spread (TCP against iperf3
#: streams over a full drop-tail queue) cannot pull the idle parameters.
IDLE_GRID = {
    "bandwidth_factor": [0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15],
    "msg_cpu_s": [0.0, 2e-4, 4e-4, 6e-4, 8e-4, 1e-3, 1.25e-3, 1.5e-3, 2e-3, 3e-3],
    "msg_fixed_s": [0.0, 1e-4, 2e-4, 3e-4, 5e-4],
    "msg_cap_bytes": [0.0, 2e3, 4e3, 8e3, 16e3, 32e3],
    "msg_share": [0.0, 0.25, 0.5, 0.75, 1.0],
    "latency_factor": [1, 2, 5, 10, 15, 20, 30, 50],
}
CONGESTED_GRID = {
    "queue_overlap": [0.0, 0.5, 1.0],
    "queue_fraction": [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0],
    "cross_weight": [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0],
    # the wait first, fitted with every message short (the search starts at short_bytes
    # 1e12: from 0 no wait would change any score), then the size below which it applies
    "short_wait_s": [0.0, 5e-3, 10e-3, 20e-3, 30e-3, 40e-3, 60e-3],
    "short_bytes": [32e3, 128e3, 512e3, 2e6, 1e12],
}


@dataclass(frozen=True)
class RunFacts:
    path: str
    method: str
    n: int
    fabric: Fabric
    cross: tuple[CrossFlow, ...]
    cpus: int | None
    batch_size: int
    time_limit_s: float | None
    steps_limit: int | None
    dense_bytes: float
    topk_bytes_per_element: float
    steps: int
    compute_s: float
    codec_s: float
    comm_s: float
    step_s: float
    bytes_sent: float
    throughput: float
    levels: dict[str, float] = field(default_factory=dict)  # level key -> mean compute_s
    level_codec: dict[str, float] = field(default_factory=dict)
    model: str = ""  # the workload's model and dataset: a calibration holds for one workload
    dataset: str = ""
    # per step the largest compute over the ranks (the last rank's), averaged over the
    # steps; 0: not measured (the mean rank's is used)
    compute_max_s: float = 0.0
    level_max: dict[str, float] = field(default_factory=dict)
    # the cross traffic's standing backlog (``sim.NetCalibration.queue_fill``): over the
    # shaped link directions of bottleneck.csv, the largest median backlog from the first
    # stream's start on, in full frames of the queue's limit; 0: idle or not measured
    queue_fill: float = 0.0

    @property
    def condition(self) -> str:
        return "congested" if self.cross else "idle"


def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def fabric_of(topo: dict[str, Any], n: int) -> Fabric | None:
    """A run's topology (star, dumbbell, leaf-spine) as a platform; None for other kinds."""
    kind = topo.get("kind")
    q = int(topo.get("queue_pkts", 100))
    if kind == "star":
        return Fabric("star", n, float(topo["rate_mbit"]), cross=int(topo.get("n_cross", 0)),
                      queue_pkts=q)
    if kind == "dumbbell":
        return Fabric("dumbbell", n, float(topo.get("access_mbit") or 1000.0),
                      cross=int(topo.get("n_cross", 0)), queue_pkts=q,
                      bottleneck_mbit=float(topo["bottleneck_mbit"]),
                      n_left=int(topo["n_left"]))
    if kind == "leafspine":
        return Fabric("leafspine", n, float(topo.get("access_mbit") or 1000.0), queue_pkts=q,
                      leaves=int(topo["leaves"]), spines=int(topo["spines"]),
                      uplink_mbit=float(topo.get("uplink_mbit") or 100.0))
    return None


def cross_flows(timeline: list[dict[str, Any]]) -> tuple[CrossFlow, ...]:
    """The scenario timeline's cross traffic as competing flows (start/stop pairs by id)."""
    starts: dict[str, dict[str, Any]] = {}
    out = []
    for ev in timeline or []:
        if ev.get("kind") == "cross_start":
            starts[ev["id"]] = ev
        elif ev.get("kind") == "cross_stop" and ev.get("id") in starts:
            s = starts.pop(ev["id"])
            out.append(CrossFlow(s["src"], s["dst"], int(s.get("streams", 1)),
                                 float(s["at_s"]), float(ev["at_s"])))
    for s in starts.values():
        out.append(CrossFlow(s["src"], s["dst"], int(s.get("streams", 1)), float(s["at_s"])))
    return tuple(sorted(out, key=lambda c: c.start_s))


def load_run(run: loading.RunData | Path) -> RunFacts | None:
    """The facts of one ok run that the simulation can replay, or None; from the run
    folder as the run reader (``testbed.analysis.loading``) loaded it."""
    run = loading.folder_of(run)
    run_dir = run.path
    read = _replayable(run)
    if read is None:
        return None
    cfg, summ, method = read
    scn = cfg.get("scenario") or {}
    n = int(cfg["world_size"])
    fab = fabric_of(scn.get("topology") or {}, n)
    if fab is None:
        return None
    cross = cross_flows(scn.get("timeline") or [])
    t_from = _cross_started(run) if cross else -math.inf
    if t_from is None:
        return None
    try:
        rows = [r for r in run.records("steps.csv")
                if (_f(r.get("step")) or 0) > WARMUP_STEPS and (_f(r.get("t")) or 0) > t_from]
    except loading.Damaged:
        return None
    if not rows:
        return None
    levels = _by_level(rows)
    dense = _mean(rows, "bytes_dense")
    wl = scn.get("workload") or {}
    fill = _queue_fill(run, t_from, fab.queue_pkts) if cross else 0.0
    return RunFacts(
        path=str(run_dir), method=method, n=n, fabric=fab, cross=cross,
        cpus=(cfg.get("host") or {}).get("cpus"), batch_size=int(wl.get("batch_size", 1)),
        time_limit_s=_f(wl.get("time_limit_s")), steps_limit=wl.get("steps"),
        dense_bytes=dense, topk_bytes_per_element=_topk_bytes_per_element(rows, dense),
        steps=len({r["step"] for r in rows}), compute_s=_mean(rows, "compute_s"),
        codec_s=_mean(rows, "codec_s"), comm_s=_mean(rows, "comm_s"),
        step_s=_mean(rows, "step_s"), bytes_sent=_mean(rows, "bytes_sent"),
        throughput=float(summ.get("throughput_samples_per_s") or math.nan),
        levels={k: _mean(v, "compute_s") for k, v in levels.items()},
        level_codec={k: _mean(v, "codec_s") for k, v in levels.items()},
        model=str(wl.get("model", "")), dataset=str(wl.get("dataset", "")),
        compute_max_s=_mean_of_max(rows, "compute_s"),
        level_max={k: _mean_of_max(v, "compute_s") for k, v in levels.items()},
        queue_fill=fill,
    )


def _replayable(run: loading.RunData) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(config, summary, method) of an ok run whose method the simulation knows, or None."""
    cfg, summ = run.config, run.summary
    method = cfg.get("method")
    if run.status != "ok" or not method:
        return None
    try:
        if not methods.parse(method).calibrated:  # NetSenseML: measured per level it chose
            level_of(method)
    except ValueError:
        return None
    return cfg, summ, method


def _cross_started(run: loading.RunData) -> float | None:
    """When the run's first cross flow was applied (events.csv), or None where unknown."""
    try:
        applied = [_f(r.get("t_applied")) for r in run.records("events.csv")
                   if r.get("kind") == "cross_start"]
        return min(a for a in applied if a is not None)
    except ValueError:  # loading.Damaged too: no events.csv, or a damaged one
        return None


def _mean(rows: list[dict[str, str]], key: str) -> float:
    """The mean of a steps.csv column over ``rows`` (blank cells left out; none: 0)."""
    vals = [v for v in (_f(r.get(key)) for r in rows) if v is not None]
    return statistics.fmean(vals) if vals else 0.0


def _mean_of_max(rows: list[dict[str, str]], key: str) -> float:
    """Per step the largest value over the ranks, averaged over the steps."""
    by_step: dict[str, float] = {}
    for r in rows:
        v = _f(r.get(key))
        if v is not None:
            by_step[r["step"]] = max(v, by_step.get(r["step"], -math.inf))
    return statistics.fmean(by_step.values()) if by_step else 0.0


def _by_level(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """``rows`` by level key (``none``, ``fp16``, ..., ``topk:<ratio>``)."""
    levels: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        lv = r.get("level") or "none"
        key = f"topk:{float(r['ratio']):.4g}" if lv == "topk" and _f(r.get("ratio")) else lv
        levels.setdefault(key, []).append(r)
    return levels


def _topk_bytes_per_element(rows: list[dict[str, str]], dense: float) -> float:
    """Bytes a kept top-k element cost on the wire (value + index) in the run's top-k
    steps; 8 (fp32 value, int32 index) where it ran none."""
    topk = [r for r in rows if r.get("level") == "topk" and _f(r.get("kept_ratio"))]
    if not (topk and dense):
        return 8.0
    return round(statistics.fmean(float(r["bytes_sent"]) / (float(r["kept_ratio"]) * dense / 4)
                                  for r in topk), 3)


def _queue_fill(run: loading.RunData | Path, t_from: float, queue_pkts: int) -> float:
    """The largest median backlog over the shaped link directions of ``run_dir``'s
    bottleneck.csv from ``t_from`` on, in full frames of a ``queue_pkts`` queue (the
    direction the cross traffic fills is the one with a standing backlog); 0 without the
    file or samples."""
    backlog: dict[tuple[str, str], list[float]] = {}
    try:
        for r in loading.folder_of(run).records("bottleneck.csv"):
            t, b = _f(r.get("t")), _f(r.get("backlog_bytes"))
            if t is not None and b is not None and t >= t_from:
                backlog.setdefault((r.get("link", ""), r.get("toward", "")), []).append(b)
    except ValueError:  # loading.Damaged too
        return 0.0
    if not backlog or queue_pkts <= 0:
        return 0.0
    worst = max(statistics.median(v) for v in backlog.values())
    return round(worst / (queue_pkts * FRAME_BYTES), 4)


def load_runs(root: Path) -> list[RunFacts]:
    """The facts of every replayable run under ``root``, in the order of their folders'
    summary.json paths; the folders read by the run reader (``loading.load_all``)."""
    runs = sorted(loading.load_all(Path(root)).runs, key=lambda r: r.path / "summary.json")
    return [f for f in (load_run(r) for r in runs) if f is not None]


@dataclass(frozen=True)
class Calibration:
    """Everything fitted: the network factors, and compute per (condition, level) and per
    method where a method's own runs measured it (NetSenseML's levels)."""

    net: NetCalibration
    compute: dict[str, dict[str, float]]  # condition -> level key -> uncontended seconds
    codec: dict[str, dict[str, float]]
    runs: list[str] = field(default_factory=list)
    error_pct: float | None = None  # median |step error| over the calibration runs
    workload: dict[str, Any] = field(default_factory=dict)  # what a prediction replays
    contention: dict[str, dict[str, float]] = field(default_factory=dict)  # fit_compute's k
    # the same two for the step's last rank (fit_compute(critical=True)); empty: none
    critical: dict[str, dict[str, float]] = field(default_factory=dict)
    critical_contention: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "net": asdict(self.net), "compute": self.compute,
                "codec": self.codec, "runs": self.runs, "error_pct": self.error_pct,
                "workload": self.workload, "contention": self.contention,
                "critical": self.critical, "critical_contention": self.critical_contention}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        if d.get("format") != FORMAT:
            raise ValueError(f"calibration: format {d.get('format')!r} is not {FORMAT!r}")
        try:
            return cls(NetCalibration(**d["net"]), d["compute"], d["codec"],
                       d.get("runs", []), d.get("error_pct"), d["workload"], d["contention"],
                       d.get("critical", {}), d.get("critical_contention", {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"calibration: missing or bad field {exc}") from None



def _line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares intercept and slope of ``y = a + b x``, or None with one ``x``."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    b = (sum((x - mx) * (y - my) for x, y in points)
         / sum((x - mx) ** 2 for x, _ in points))
    return my - b * mx, b


def fit_compute(runs: list[RunFacts], critical: bool = False) -> tuple[
        dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Uncontended compute and codec seconds, and the contention share ``k``, per
    condition and level key: ``compute(n) = c x (1 + k x (oversubscription(n) - 1))``.

    ``k`` is fitted, not assumed 1: on the emulating machine a rank computes while others
    wait in the ring, so n ranks on fewer cores stretch compute by less than n / cores.
    A key measured at one worker count only takes the median ``k`` of the others.
    ``critical``: the same fit of the step's last rank's compute (``RunFacts.compute_max_s``;
    the mean rank's where a run did not measure it).
    """
    acc: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r in runs:
        extra = oversubscription(r.n, r.cpus) - 1.0
        spec = methods.parse(r.method)
        if spec.calibrated:
            src = r.level_max if critical and r.level_max else r.levels
            items = [(f"{spec.name}/{k}", v, r.level_codec.get(k, 0.0))
                     for k, v in src.items()]
        else:
            level, ratio = level_of(r.method)
            key = f"topk:{ratio:.4g}" if level == "topk" else level
            comp = r.compute_max_s if critical and r.compute_max_s else r.compute_s
            items = [(key, comp, r.codec_s)]
        for key, comp, codec in items:
            acc.setdefault((r.condition, key), []).append((extra, comp, codec))
    fitted: dict[tuple[str, str], tuple[float, float] | None] = {}
    for ck, pts in acc.items():
        line = _line([(x, y) for x, y, _ in pts])
        fitted[ck] = None if line is None or line[0] <= 0 else (
            line[0], min(1.0, max(0.0, line[1] / line[0])))
    ks = [f[1] for f in fitted.values() if f is not None]
    k_default = statistics.median(ks) if ks else 1.0
    compute: dict[str, dict[str, float]] = {}
    codec: dict[str, dict[str, float]] = {}
    share: dict[str, dict[str, float]] = {}
    for (cond, key), pts in acc.items():
        f = fitted[(cond, key)]
        k = f[1] if f is not None else k_default
        compute.setdefault(cond, {})[key] = statistics.fmean(y / (1 + k * x) for x, y, _ in pts)
        codec.setdefault(cond, {})[key] = statistics.fmean(c / (1 + k * x) for x, _, c in pts)
        share.setdefault(cond, {})[key] = k
    return compute, codec, share


def compute_table(cal: Calibration, condition: str, method: str, n: int = 1,
                  cpus: int | None = None) -> Compute:
    """The compute seconds a job of ``method`` runs with ``n`` workers on ``cpus`` shared
    CPUs (None: a machine each): the fixed methods' levels, and for NetSenseML its own
    measured levels where the calibration runs saw them (the policy's own overhead)."""
    base = cal.compute.get(condition) or cal.compute.get("idle") or {}
    codec = cal.codec.get(condition) or cal.codec.get("idle") or {}
    share = cal.contention.get(condition) or cal.contention.get("idle") or {}
    crit = cal.critical.get(condition) or cal.critical.get("idle") or {}
    crit_share = (cal.critical_contention.get(condition) or cal.critical_contention.get("idle")
                  or {})
    extra = oversubscription(n, cpus) - 1.0
    spec = methods.parse(method)
    own = f"{spec.name}/" if spec.calibrated else None  # its own levels' keys

    def table(src: dict[str, float], k: dict[str, float] = share) -> dict[str, float]:
        out = {key: v * (1 + k.get(key, 1.0) * extra) for key, v in src.items() if "/" not in key}
        if own is not None:
            out.update({key.split("/", 1)[1]: v * (1 + k.get(key, 1.0) * extra)
                        for key, v in src.items() if key.startswith(own)})
        return out

    return Compute(table(base), table(codec), table(crit, crit_share))


def job_for(run: RunFacts, cal: Calibration, net: NetCalibration | None = None,
            steps: int | None = None, measured_queue: bool = False) -> Job:
    """The SimGrid job that replays ``run`` (same platform, workers, cross traffic, CPUs;
    ``measured_queue``: and the standing backlog the run measured, where it has one)."""
    net = net or cal.net
    if measured_queue and run.cross and run.queue_fill > 0:
        net = replace(net, queue_fill=run.queue_fill)
    return Job(
        fabric=run.fabric, method=run.method, dense_bytes=run.dense_bytes,
        batch_size=run.batch_size, compute=compute_table(cal, run.condition, run.method, run.n, run.cpus),
        cal=net, topk_bytes_per_element=run.topk_bytes_per_element,
        cross=run.cross, cores=run.cpus, htb=True,
        time_limit_s=None if steps else (run.time_limit_s or None),
        steps=steps or (None if run.time_limit_s else int(run.steps_limit or 20)),
    )


@dataclass
class Predicted:
    compute_s: float
    comm_s: float
    step_s: float
    throughput: float
    levels: dict[str, int]
    wall_s: float


def summarise(res: SimResult, workers: int, batch: int) -> Predicted:
    """The simulated run's step means (the loader's window) and throughput (summary.json's
    definition: samples of steps 2..N over the time from the end of step 1 to step N)."""
    t_from = res.cross_started_t if res.cross_started_t is not None else -math.inf
    win = [s for s in res.steps if s.step > WARMUP_STEPS and s.t > t_from] or res.steps
    ends = [s.t + s.step_s for s in res.steps]
    thr = (workers * batch * (len(ends) - 1) / (ends[-1] - ends[0])
           if len(ends) > 2 and ends[-1] > ends[0] else workers * batch / res.steps[-1].step_s)
    levels: dict[str, int] = {}
    for s in win:
        k = f"topk:{s.ratio:.3g}" if s.level == "topk" else s.level
        levels[k] = levels.get(k, 0) + 1
    return Predicted(statistics.fmean(s.compute_s for s in win),
                     statistics.fmean(s.comm_s for s in win),
                     statistics.fmean(s.step_s for s in win), thr, levels, res.wall_s)


def _errors(runs: list[RunFacts], cal: Calibration, net: NetCalibration,
            workers: int, measured_queue: bool = False) -> list[float]:
    res = simulate_isolated([job_for(r, cal, net, steps=CALIB_STEPS,
                                     measured_queue=measured_queue) for r in runs], workers)
    return [(summarise(x, r.n, r.batch_size).step_s - r.step_s) / r.step_s
            for r, x in zip(runs, res, strict=True)]


def workload_of(runs: list[RunFacts]) -> dict[str, Any]:
    """The one workload of the calibration runs (a prediction replays it), or ValueError."""
    kinds = {(r.model, r.dataset, r.batch_size) for r in runs}
    if len(kinds) != 1:
        raise ValueError("calibration: runs of more than one workload (model, dataset, "
                         f"batch): {sorted(kinds)}; calibrate on one workload's runs")
    (model, dataset, batch), = kinds
    topk = [r.topk_bytes_per_element for r in runs
            if methods.parse(r.method).topk_ratio is not None]
    return {"model": model, "dataset": dataset, "batch_size": batch,
            "dense_bytes": statistics.median(r.dense_bytes for r in runs),
            "topk_bytes_per_element": statistics.median(topk) if topk else 8.0}


def calibrate(runs: list[RunFacts], workers: int = 2, rounds: int = 2,
              log: Any = None, measured_queue: bool = False) -> Calibration:
    """Compute tables and network factors from ``runs`` (none of them is validated);
    ``measured_queue``: each congested run with its own backlog (module docstring)."""
    if not runs:
        raise ValueError("calibration: no usable runs (ok runs on star/dumbbell/leafspine)")
    compute, codec, share = fit_compute(runs)
    critical, _, critical_share = fit_compute(runs, critical=True)
    cal = Calibration(NetCalibration(latency_factor=10.0, bandwidth_factor=1.0,
                                     msg_cpu_s=5e-4, msg_share=0.5, short_bytes=1e12),
                      compute, codec,
                      [r.path for r in runs], workload=workload_of(runs), contention=share,
                      critical=critical, critical_contention=critical_share)
    best = cal.net
    cache: dict[tuple[Any, ...], float] = {}

    def score(net: NetCalibration, group: list[RunFacts], label: str) -> float:
        key = (label, *asdict(net).values())
        if key not in cache:
            errs = _errors(group, cal, net, workers, measured_queue)
            cache[key] = sum(e * e for e in errs)
            if log:
                log(f"  {key}: rms {100 * math.sqrt(cache[key] / len(errs)):.1f} %")
        return cache[key]

    idle = [r for r in runs if not r.cross]
    congested = [r for r in runs if r.cross]
    for grid, group, label, restart in ((IDLE_GRID, idle, "idle", None),
                                        (CONGESTED_GRID, congested, "congested",
                                         "queue_overlap")):
        if not group:
            continue
        # The congested stage searches with queue_overlap held at each of its values and
        # keeps the best end: the overlap (the queue added to a transfer or overlapping it) changes
        # what the other coordinates mean, and one search from a single start kept the
        # overlap it chose first (rms 14.4 % on the congested calibration runs, against
        # 11.4 % without overlap).
        starts = [replace(best, **{restart: v}) for v in grid[restart]] if restart else [best]
        ends = []
        for cur in starts:
            for _ in range(rounds):
                for name, values in grid.items():
                    if name == restart:  # held at this start's value
                        continue
                    cands = [replace(cur, **{name: v}) for v in values]
                    cur = min(cands, key=lambda n, g=group, lab=label: score(n, g, lab))
            ends.append(cur)
        best = min(ends, key=lambda n, g=group, lab=label: score(n, g, lab))
    errs = _errors(runs, cal, best, workers, measured_queue)
    med = statistics.median(abs(e) for e in errs) * 100
    fills = [r.queue_fill for r in congested if r.queue_fill > 0]
    if measured_queue and fills:  # what a run not made is predicted with
        best = replace(best, queue_fill=round(statistics.median(fills), 4))
    return replace(cal, net=best, error_pct=round(med, 2))


def point_of(run: RunFacts) -> tuple[Any, ...]:
    """What makes two runs the same emulated point (everything but the seed)."""
    return (run.method, run.n, run.condition, run.fabric, run.cross, run.cpus,
            run.batch_size, run.time_limit_s, run.steps_limit, run.model, run.dataset)


def seed_groups(runs: list[RunFacts]) -> list[list[RunFacts]]:
    """The runs grouped by point (``point_of``), in the order first seen."""
    groups: dict[tuple[Any, ...], list[RunFacts]] = {}
    for r in runs:
        groups.setdefault(point_of(r), []).append(r)
    return list(groups.values())


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean of one point's seeds, in %: how far apart its runs landed."""
    m = statistics.fmean(values)
    return 100.0 * (max(values) - min(values)) / m if m else 0.0


def validate(runs: list[RunFacts], cal: Calibration, workers: int = 2,
             measured_queue: bool = False) -> list[dict[str, Any]]:
    """One row per emulated point (method, W, condition, scenario): the runs of a point's
    seeds are averaged and the mean is the ground truth the simulation is compared with,
    with the seeds' spread beside the error. One congested run of a few steps under bulk
    TCP streams is one draw of their window and queue dynamics (the same point lands 45-65 %
    apart between seeds), so an error against one seed would measure that draw. The
    simulation is deterministic and the same for every seed of a point: it runs once per
    point, for the run's full length (not ``CALIB_STEPS``). ``measured_queue``: each seed
    of a congested point is simulated with its own backlog and the predictions averaged
    as the measurements are."""
    groups = seed_groups(runs)
    jobs: list[Job] = []
    spans = []
    for g in groups:
        members = g if measured_queue and g[0].cross else g[:1]
        spans.append((len(jobs), len(members)))
        jobs += [job_for(q, cal, measured_queue=measured_queue) for q in members]
    done = simulate_isolated(jobs, workers)
    res = [done[a:a + n] for a, n in spans]
    rows = []
    for g, xs in sorted(zip(groups, res, strict=True),
                        key=lambda p: (p[0][0].method, p[0][0].condition, p[0][0].n)):
        r = g[0]
        p = _mean_prediction([summarise(x, r.n, r.batch_size) for x in xs])
        steps = [q.step_s for q in g]
        thrs = [q.throughput for q in g]
        step, thr = statistics.fmean(steps), statistics.fmean(thrs)
        rows.append({
            "method": r.method, "workers": r.n, "condition": r.condition, "seeds": len(g),
            "payload_kB": round(statistics.fmean(q.bytes_sent for q in g) / 1e3, 2),
            "levels_pred": " ".join(f"{k}:{v}" for k, v in sorted(p.levels.items())),
            "comm_meas_s": round(statistics.fmean(q.comm_s for q in g), 4),
            "comm_pred_s": round(p.comm_s, 4),
            "step_meas_s": round(step, 4), "step_spread_pct": round(spread_pct(steps), 1),
            "step_pred_s": round(p.step_s, 4),
            "step_err_pct": round(100.0 * (p.step_s - step) / step, 1),
            "thr_meas": round(thr, 1), "thr_spread_pct": round(spread_pct(thrs), 1),
            "thr_pred": round(p.throughput, 1),
            "thr_err_pct": round(100.0 * (p.throughput - thr) / thr, 1),
            "step_seeds_s": " ".join(f"{v:.4g}" for v in steps),
            "sim_wall_s": round(p.wall_s, 3), "run": " ".join(q.path for q in g),
        })
    return rows


def _mean_prediction(ps: list[Predicted]) -> Predicted:
    """Several seeds' predictions as one (means; the first one's level counts)."""
    if len(ps) == 1:
        return ps[0]
    return Predicted(statistics.fmean(p.compute_s for p in ps),
                     statistics.fmean(p.comm_s for p in ps),
                     statistics.fmean(p.step_s for p in ps),
                     statistics.fmean(p.throughput for p in ps), ps[0].levels,
                     sum(p.wall_s for p in ps))


def save_calibration(cal: Calibration, path: Path) -> None:
    write_json(path, cal.as_dict())


def load_calibration(path: Path) -> Calibration:
    """A calibration file written by ``save_calibration``; ValueError naming what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"calibration: cannot read {str(path)!r} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"calibration: {Path(path).name} is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"calibration: {Path(path).name} is not a JSON object")
    return Calibration.from_dict(data)


__all__ = ["Calibration", "Predicted", "RunFacts", "StepRecord", "calibrate", "job_for",
           "load_calibration", "load_run", "load_runs", "point_of", "save_calibration",
           "seed_groups", "spread_pct", "summarise", "validate"]
