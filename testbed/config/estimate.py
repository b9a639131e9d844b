"""How long one run takes on this host, before it runs: ``netsense sweep --dry-run`` and the
sweep's ETA.

A native run lasts its training time (its time limit, or steps x ``FALLBACK_STEP_S``, or
to its target where it stops there: :func:`_native_to_target`) plus
``PER_RUN_OVERHEAD_S``; an own job's length is the job's, bounded by its deadline (said as
a bound). A run on the emulated accelerator lasts its **virtual** training
time x the dilation factor ``k`` (``testbed.orchestration.dilation``), plus the overhead
and, with recorded gradients, the one real step that records them. Two of those numbers are
not known before the run and are estimated here, each from stated figures:

* the virtual time of a run given in steps: a step is the profile's step
  (``netsenseml.accelerator``), the codec's profiled cost, and the communication of the
  closed form (DESIGN.md, "The per-step model"): ring allreduce sends
  ``2 (n-1)/n x B``, ring all-gather ``(n-1) x B`` per worker over the slowest training
  link, ``B`` = parameters x 4 bytes x the method's wire factor (``netsenseml.methods``).
  Adaptive methods are taken at top-k 0.01 (their floor at a constrained rate), PowerSGD
  rank 4 at 1 % of the gradient; no cross traffic, no per-message latency (an estimate
  low by those);
* ``k`` under ``dilation: auto``: the larger of the network's factor (the faithful range)
  and the host's, ``margin`` x the host's real work over its profiled slot, with the
  host's work from figures measured on the 2-core build machine (one thread per worker,
  ``benchmarks/paper_models.py`` and ``python -m workloads.host_timing``) scaled as the
  host timing's copies sharing the cores measure it (``max(1, SHARED_SLOWDOWN x n / cores)``):
  ``HOST_MEASURED`` (or
  ``HOST_REAL_PER_PROFILE`` x the profile) for real compute, the optimizer step in one slot
  with the next forward as the pacer holds them (SGD over 11.2 M parameters: 20 ms here
  against the profile's 0.3 ms would alone make a real-compute run's factor ~400 at 8
  workers); ``RECORDED_NS`` per
  gradient element for the recorded surrogate (no optimizer step), ``BETWEEN_NS`` for what
  a worker does between two steps; ``CODEC_NS`` per element per codec level. ``auto``
  also costs its host timing before the run (:func:`host_timing_s`).

A run that stops at its target (``stop-at-target``) lasts at most the steps to it: the mean
steps of the method's level in the scenario's convergence table, or in the shipped table
measured for the same workload and world size (``testbed/scenarios/convergence``), x the
step (a native run: the table's own loopback step, + the transfer). Adaptive methods take
the table's plain steps (their policy trades steps only where the network pays for them),
DGC and PowerSGD the table's top-k factor at their share. The host timing is counted once per
configuration the run caches it by (``factor.timing_key``; :func:`estimate_runs`), and not
at all where this host holds its measurement already.

Before 2026-12-07 a small model's host work was ``HOST_REAL_PER_PROFILE`` x its profile
(300x, fitted on ResNet-18 at 224 px): the crossover MLP came out at ~135 ms a step where
the host timing measures ~10 ms, ``k`` ~ 790 instead of ~130, and the time limit was taken where the
run stops at its target (``netsense run accel-static -n``: 25 min a run, ~35 s real).

The estimate says so: ``--dry-run`` prints its basis, and the ETA of a running sweep scales
the pending estimates by how the finished runs compared with theirs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netsenseml import accelerator, convergence, methods
from netsenseml.dilation import Dilation
from testbed.common import files
from testbed.config import events, factor, faithful
from testbed.simulation import advise
from workloads import registry, sizes

#: Seconds each run costs on top of its training time (build, workers forked from the
#: pre-imported zygote up to their first step, final evaluation, exit, teardown), well above
#: what benchmarks/run_overhead.py prints on an idle machine (docs/measurements.md), to
#: leave room for a loaded machine and cross-traffic servers.
PER_RUN_OVERHEAD_S = 2.5
#: Used for the estimate when a native scenario states only a step count, not a time limit.
FALLBACK_STEP_S = 0.25

#: Host (1 thread, this machine) forward + backward over the profile's: resnet18-imagenet
#: at batch 32, 224 px: 2.02 s forward against 6.7 ms, 2.73 s backward against 13.3 ms
#: (benchmarks/paper_models.py); the larger ratio, the forward's. For a model not in
#: ``HOST_MEASURED``.
HOST_REAL_PER_PROFILE = 300.0
#: A real step's forward, backward and optimizer seconds on this host (1 thread, alone) where
#: measured, and the batch they were measured at: benchmarks/paper_models.py (224 px) and
#: workloads.host_timing (32 px; the MLP: the crossover workload, width 512, the ``auto``
#: host timing of the committed accel-crossover runs, 2 copies on 2 cores: 2.6 + 3.9 + 0.74 ms,
#: where ``HOST_REAL_PER_PROFILE`` x its 0.45 ms profile made 135 ms and k ~ 790, not ~130).
#: Another batch scales forward and backward linearly; another width (parameter count) of
#: the same model scales all three by the parameters.
HOST_MEASURED: dict[tuple[str, str], tuple[float, float, float, int]] = {
    ("resnet18-imagenet", "cifar100-224-synth"): (2.02, 2.73, 0.020, 32),
    ("resnet18-imagenet", "cifar100-synth"): (0.040, 0.098, 0.020, 32),
    ("vgg16", "cifar100-224-synth"): (28.73, 29.13, 0.639, 32),
    ("mlp", "mixture"): (0.0026, 0.0039, 0.00074, 256),
}
#: The parameter count each ``HOST_MEASURED`` entry was measured at (where a knob changes it).
HOST_MEASURED_PARAMS: dict[str, int] = {"mlp": 548_140}
#: The optimizer's host cost per parameter where not measured (SGD with momentum, 1 thread:
#: 20 ms for 11.2 M).
OPTIMIZER_NS = 1.8
#: The recorded surrogate's forward and backward per gradient element (ns, 1 thread):
#: resnet18-imagenet 14 + 20 ms for 11.2 M, vgg16 89 + 245 ms for 134.7 M.
RECORDED_NS = {"forward": 1.3, "backward": 1.9}
#: A codec's compress + residual + decode per gradient element (ns, 1 thread, 8 ranks'
#: payloads decoded for the gathered levels): ``python -m workloads.host_timing --model
#: resnet18-imagenet --dataset cifar100-224-synth --grads recorded --world 8`` gave fp16
#: 20 ms, int8 509 ms, exact top-k 849 ms, DGC's sampled top-k 423 ms, random-k 64 ms for
#: 11.2 M elements.
CODEC_NS = {"fp16": 1.8, "bf16": 1.8, "int8": 45.0, "topk": 76.0, "dgc": 38.0, "randomk": 5.7}
#: The same for a small gradient decoded for few ranks, where it stays in cache: the
#: committed accel-crossover host timings (the MLP's 548 k elements, 2 ranks) timed fp16 0.9 ms,
#: int8 2.4-2.8 ms, top-k 6.5-9.2 ms, DGC 2.8 ms -- 5-10x below ``CODEC_NS`` per element
#: (at ``CODEC_NS`` int8's codec alone made the backward's need k ~ 200 where the host timing
#: gave 130). Used below ``CODEC_SMALL_BELOW`` elements x ranks (the two measured points
#: are 1.1 M and 90 M; the boundary is their geometric middle).
CODEC_NS_SMALL = {"fp16": 1.7, "bf16": 1.7, "int8": 5.0, "topk": 14.0, "dgc": 5.1,
                  "randomk": 1.0}
CODEC_SMALL_BELOW = 10_000_000
#: What a worker does between two steps: a fixed part (the next batch, the step's records:
#: the MLP's 548 k elements took 2.6 ms in the committed accel-crossover host timings) and a part
#: per gradient element (ns, 1 thread: the gradient's health norm; host_timing's
#: ``between_s``: ~23 ms for ResNet-18's 11.2 M with 8 copies on 2 cores, ~2.2x alone, i.e.
#: ~10.6 ms = the fixed part + 0.77 ns x 11.2 M).
BETWEEN_FIXED_S = 0.0022
BETWEEN_NS = 0.77
#: How much slower a part runs with ``n`` one-thread copies on ``cores`` cores than alone,
#: per ``n / cores``: the host timing's 8 copies on this 2-core host timed the surrogate's
#: passes and the codecs 2.1-2.3x their one-copy times, not 4x (they do not all compute
#: at once); the factors ``auto`` chose in the committed paper-scale runs fit 0.65 best.
SHARED_SLOWDOWN = 0.65
#: The host timing (``workloads.host_timing``): warm-up and timed steps, and codec repetitions
#: (one warm-up and three timed), as ``testbed.orchestration.dilation`` runs it; plus
#: each copy's interpreter and torch import (CPU seconds, shared by the cores).
TIMING_STEPS = 14
TIMING_CODEC_REPS = 4
TIMING_IMPORT_S = 3.0
#: What the estimate assumes an adaptive method sends (NetSenseML's floor, where it sat at
#: every constrained rate of the paper-scale runs) and PowerSGD's share of the gradient
#: (both in ``factor``, whose rule needs them too).
ADAPTIVE_AS = factor.ADAPTIVE_AS
POWERSGD_SHARE = factor.POWERSGD_SHARE
#: An adaptive method's steps to the target over plain training's: NetSenseML took 220-260
#: where the table's allreduce took 213 (the committed accel-crossover and accel-policy runs).
ADAPTIVE_STEPS = 1.1


def cores() -> int:
    return max(1, os.cpu_count() or 1)


def _level(spec: methods.MethodSpec) -> tuple[str | None, float, str]:
    """(codec level, wire share of fp32, reduction) of the bytes a method sends."""
    return factor.wire_share(spec)


@functools.lru_cache(maxsize=32)
def _low_rank_share(model: str, profile: str, dataset: str, knobs: tuple, context: int,
                    rank: int) -> float | None:
    """PowerSGD's wire share of fp32 for this model: its P, Q and uncompressed tensors per
    bucket of DDP's layout, as torch's hook sizes them (``advise.powersgd_sizes``), or None
    where the layout is not known. The factor keeps the registry's generic share
    (``factor.POWERSGD_SHARE``); the run's time is its steps', which these bytes set: VGG-16's
    rank 4 sends 0.25 % of its gradient, not 1 %."""
    try:
        wl = advise.load_workload(model, profile=profile, dataset=dataset, knobs=dict(knobs),
                                  context=context)
    except advise.AdviseError:
        return None
    elements = sum(b.elements for b in wl.buckets)
    sent = sum(sum(advise.powersgd_sizes(b.shapes, rank)) for b in wl.buckets)
    return sent / elements if elements else None


def _sent(scenario: Any, spec: methods.MethodSpec) -> tuple[str | None, float, str]:
    """:func:`_level`, with a low-rank method's share from the model's own layout."""
    level, share, reduction = _level(spec)
    if spec.rank is None:
        return level, share, reduction
    wl, acc = scenario.workload, scenario.accelerator
    own = _low_rank_share(wl.model, acc.profile, wl.dataset,
                          tuple(sorted(wl.knobs().items())), int(wl.arg("context", 128)),
                          spec.rank)
    return level, share if own is None else own, reduction


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _native(scenario: Any, spec: methods.MethodSpec) -> dict[str, Any]:
    own = _own_job(scenario)
    if own is not None:
        return own
    limit = _get(scenario, "workload.time_limit_s")
    steps = _get(scenario, "workload.steps")
    train = float(limit) if limit else float(steps) * FALLBACK_STEP_S if steps else 30.0
    if hasattr(scenario, "world_size"):
        to_target = _native_to_target(scenario, spec)
        if to_target is not None:  # stops at the target: at most the steps to it
            train = min(train, to_target)
    return {"seconds": train + PER_RUN_OVERHEAD_S, "k": 1.0, "virtual_s": train}


def _own_job(scenario: Any) -> dict[str, Any] | None:
    """An own job's run (``workload.command``): the job decides its length, which nothing
    here can know; its deadline bounds it (``bound``: the figure is an upper bound, and
    the plans say "at most")."""
    if not (_get(scenario, "workload.command") and hasattr(scenario, "deadline_s")):
        return None
    bound = float(scenario.deadline_s())
    return {"seconds": bound, "k": 1.0, "virtual_s": bound, "bound": True}


def _native_to_target(scenario: Any, spec: methods.MethodSpec) -> float | None:
    """A native run's seconds to its target where it stops there (the convergence table's
    steps x its loopback step + the transfer + the standing queue behind cross traffic);
    an adaptive method's as the best of the levels it moves between (``ADAPTIVE_AS`` and
    the ladder's fixed levels): its policy picks the least time to accuracy. The committed
    xover-d70 runs (2 workers, 8 cross streams 70 % of the time): NetSenseML took 19.4 s
    where the table's plain steps at top-k's share made 8.2 (300 steps, 184 of them top-k,
    ~60 ms each under the queue); allreduce 23.3 s."""
    if spec.kind == "adaptive":
        times = [_native_to_target(scenario, methods.as_spec(m)) for m in
                 (factor.ADAPTIVE_AS, *(i.name for i in methods.ladder() if i.arg is None))]
        known = [t for t in times if t is not None]
        return min(known) if known else None
    target = _to_target(scenario, spec)
    if target is None or not target[1]:
        return None
    rates = faithful.training_rates(scenario.model_dump(mode="json"))
    wl = scenario.workload
    _, share, reduction = _level(spec)
    elements = gradient_elements(wl.model, wl.knobs(), wl.dataset)
    step = (target[1] + _comm_s(scenario.world_size, elements, rates, share, reduction)
            + _queue_wait_s(scenario, elements, rates, reduction))
    return target[0] * step


def _comm_s(n: int, elements: int, rates: list[float], share: float, reduction: str) -> float:
    """A step's transfer over the slowest training link (``factor.transfer_s``)."""
    if not (rates and min(rates) > 0):
        return 0.0
    return factor.transfer_s(elements, n, min(rates), share, reduction)


#: Messages a DDP step's collectives send per bucket and ring phase: all-gather two (values
#: and indices, or a codec's payload and its scale), allreduce one.
MESSAGES = {"allreduce": 1, "allgather": 2}


def _queue_wait_s(scenario: Any, elements: int, rates: list[float], reduction: str) -> float:
    """The standing queue cross traffic keeps at the bottleneck, waited per message (a ring
    phase of each bucket's collectives: ``testbed.simulation``'s short-message wait), for
    the share of the run the streams run. Without it the committed accel-d70 runs of small
    payloads (int8, top-k) took 1.3-1.6x the estimate's step; with it 0.9-1.15x."""
    share = congested_share(scenario)
    if not (share and rates and min(rates) > 0):
        return 0.0
    n = scenario.world_size
    queue = int(getattr(scenario.topology, "queue_pkts", 100) or 100)
    phases = 2 * (n - 1) if reduction == "allreduce" else n - 1
    messages = factor.payload_buckets(elements) * phases * MESSAGES.get(reduction, 1)
    return share * messages * queue * 1500 * 8 / (min(rates) * 1e6)


def congested_share(scenario: Any) -> float:
    """The share of the run's time limit some cross traffic runs (0 without a limit)."""
    limit = scenario.workload.time_limit_s
    timeline = getattr(scenario, "timeline", None)
    if not (limit and timeline):
        return 0.0
    actions, _ = events.expand(timeline, end_s=limit)
    running: set[str] = set()
    since, total = 0.0, 0.0
    for a in actions:
        if a.kind not in ("cross_start", "cross_stop"):
            continue
        if running:
            total += min(a.at, limit) - since
        since = min(a.at, limit)
        (running.add if a.kind == "cross_start" else running.discard)(str(a.target))
    if running:
        total += limit - since
    return min(max(total / limit, 0.0), 1.0)


def estimate(scenario: Any, method: str | None = None) -> dict[str, Any]:
    """``seconds`` (real, the whole run), ``k`` (the factor assumed), ``virtual_s`` (the
    training time on the run's clock), ``step_s`` (virtual, when estimated), ``host_timing_s``
    (the ``auto`` host timing's real seconds before the run, in ``seconds``) and ``timing_key``
    (what the host timing is cached by: runs of one key after the first pay none); ``bound``
    True where ``seconds`` is only an upper bound (an own job: its deadline)."""
    spec = methods.as_spec(method or "allreduce")  # text enters here, once
    acc = getattr(scenario, "accelerator", None)
    if acc is None or not hasattr(scenario, "world_size") or _own_job(scenario) is not None:
        return _native(scenario, spec)
    wl = scenario.workload
    try:
        timing = acc.timing(wl.model, wl.knobs(), wl.batch_size)
    except accelerator.ProfileError:
        return _native(scenario, spec)
    n = scenario.world_size
    elements = gradient_elements(wl.model, wl.knobs(), wl.dataset)
    level, share, reduction = _sent(scenario, spec)
    rates = faithful.training_rates(scenario.model_dump(mode="json"))

    def step_of(lv: tuple[str | None, float, str]) -> float:
        codec_v = timing.codec_s(lv[0], 4 * elements) if lv[0] else 0.0
        return (timing.step_s + codec_v + _comm_s(n, elements, rates, lv[1], lv[2])
                + _queue_wait_s(scenario, elements, rates, lv[2]))

    step_v = step_of((level, share, reduction))
    if spec.adaptive:  # the fastest level it has
        step_v = min([step_v, *(step_of(_level(c)) for c in methods.dense_levels())])
    limit, steps = wl.time_limit_s, wl.steps
    virtual = float(limit) if limit else float(steps or 0) * step_v
    plan = None if limit or not steps else spec.planned_levels(
        int(steps), factor.payload_buckets(elements))
    if plan:  # a rule whose levels do not wait on the network: its steps one by one
        virtual = sum(step_of(_level(s)) for s in plan)
    target = _to_target(scenario, spec)
    if target is not None:  # stops at the target: at most its steps
        virtual = min(virtual, target[0] * step_v)
    dense_steps = spec.payload_dense_steps if wl.grads == "payload" else spec.dense_steps
    if not limit and steps and dense_steps:
        dense = min(int(steps), dense_steps)  # torch's hook: plain allreduce first
        virtual += dense * (_comm_s(n, elements, rates, 1.0, reduction)
                            - _comm_s(n, elements, rates, share, reduction))
    k, record, host_timing = _dilation(scenario, timing, elements, spec, rates)
    return {"seconds": Dilation(k).real_s(virtual) + PER_RUN_OVERHEAD_S + record + host_timing,
            "k": k, "virtual_s": virtual, "step_s": step_v, "host_timing_s": host_timing,
            "timing_key": factor.timing_key(scenario, spec) if host_timing else None}


def _dilation(scenario: Any, timing: accelerator.Timing, elements: int,
              spec: methods.MethodSpec, rates: list[float]) -> tuple[float, float, float]:
    """``(k, the recorded-gradient step's real s, the host timing's real s)`` as the run picks k."""
    acc, wl, n = scenario.accelerator, scenario.workload, scenario.world_size
    shared = max(1.0, SHARED_SLOWDOWN * n / cores())
    fwd, bwd, opt = _host_real(wl.model, wl.dataset, timing, elements, wl.batch_size)
    record = (fwd + bwd) * max(1.0, n / cores()) if wl.grads == "recorded" else 0.0
    if acc.dilation != "auto":
        return float(acc.dilation), record, 0.0
    if wl.grads == "payload":  # nothing real is timed: no host timing, no recording
        return max(factor.rate_factor(max(rates, default=0.0)), factor.payload_factor(
            timing, elements, n, cores(), acc.margin, wl.threads, acc.max_overrun, rates,
            spec)), 0.0, 0.0
    level = _level(spec)[0]
    part = _host_parts(wl.grads, fwd, bwd, opt, elements, level, n)
    # the parts as the host timing would time them, for the rule auto applies to them
    real = {"forward_s": part["forward"] * shared, "backward_s": part["backward"] * shared,
            "optimizer_s": part["optimizer"] * shared, "between_s": part["between"] * shared,
            "codec_s": {level: part["codec"] * shared} if level else {},
            "elements": elements, "processes": n, "threads": wl.threads, "cores": cores(),
            # CPU seconds of a whole step and of the codec, one copy (lockstep_need)
            "step_cpu_s": part["forward"] + part["backward"] + part["optimizer"]
            + part["between"]}
    k = max(factor.rate_factor(max(rates, default=0.0)),
            factor.least_factor(timing, real, acc.margin))
    return k, record, host_timing_s(part, record, n, shared)


#: Where the shipped convergence tables are: a scenario that stops at its target and names
#: none is estimated from the one measured for its workload, where there is one.
CONVERGENCE_DIR = Path(__file__).resolve().parent.parent / "scenarios" / "convergence"


def _to_target(scenario: Any, spec: methods.MethodSpec) -> tuple[float, float | None] | None:
    """``(steps, loopback step s or None)`` to the scenario's target for the method, where
    the run stops at the target (``stop-at-target``) and a convergence table for its
    workload is known (its own ``convergence``, or a shipped one of the same workload and
    world size); None otherwise (the run is estimated to its time limit)."""
    wl = scenario.workload
    if not wl.arg("stop-at-target") or wl.target_accuracy is None:
        return None
    table = _table_for(scenario)
    if table is None:
        return None
    levels = table["levels"]
    cap = float(table.get("max_steps") or 0)

    def mean(key: str, field: str) -> float | None:
        vals = [cap if v is None else float(v) for v in (levels.get(key) or {}).get(field) or []]
        return sum(vals) / len(vals) if vals and all(vals) else None

    base = mean("none", "steps")
    if base is None:
        return None
    try:
        key = convergence.level_key(spec)
    except convergence.ConvergenceError:  # adaptive: near the base; DGC, PowerSGD: as top-k
        key = None
    if key is not None and mean(key, "steps"):
        ms = mean(key, "step_ms")
        return mean(key, "steps"), None if ms is None else ms / 1e3
    ratio = spec.topk_ratio if spec.topk_ratio is not None else POWERSGD_SHARE
    c = (ADAPTIVE_STEPS if spec.adaptive
         else convergence.from_table(table).factor("topk", ratio))
    ms = mean("none", "step_ms")
    return base * c, None if ms is None else ms / 1e3


def _table_for(scenario: Any) -> dict[str, Any] | None:
    """The scenario's convergence table, or a shipped one measured for its workload."""
    if getattr(scenario, "convergence", None):
        return files.read_json(Path(scenario.convergence))
    wl = scenario.workload
    for path in sorted(CONVERGENCE_DIR.glob("*.json")):
        data = files.read_json(path) or {}
        w = data.get("workload") or {}
        if (w.get("model"), w.get("dataset"), w.get("batch_size"), w.get("target_accuracy"),
                w.get("eval_every"), data.get("world_size")) == (
                wl.model, wl.dataset, wl.batch_size, wl.target_accuracy, wl.eval_every,
                scenario.world_size) and all(wl.knobs().get(k) == v for k, v in
                                             (w.get("args") or {}).items()):
            return data
    return None


def gradient_elements(model: str, knobs: dict[str, Any], dataset: str) -> int:
    """The model's parameters (0 where unknown): the registry's count, or the MLP's on the
    ``mixture`` vectors (the crossover workload), which the registry cannot count (its
    count takes the classes only, an MLP's size depends on the input too)."""
    n = registry.param_count(model, knobs, dataset)
    if n is None and model == "mlp" and dataset == "mixture":
        n = sizes.mlp_params(*sizes.MIXTURE_SHAPE, width=int(knobs.get("width", 1024)))
    return int(n or 0)


def _host_parts(grads: str, fwd: float, bwd: float, opt: float, elements: int,
                level: str | None, world: int = 8) -> dict[str, float]:
    """One worker's real seconds per step part, alone on a core (1 thread)."""
    if grads == "recorded" and elements:  # the surrogate; no optimizer step
        fwd = elements * RECORDED_NS["forward"] * 1e-9
        bwd = elements * RECORDED_NS["backward"] * 1e-9
        opt = 0.0
    return {"forward": fwd, "backward": bwd, "optimizer": opt,
            "between": BETWEEN_FIXED_S + elements * BETWEEN_NS * 1e-9,
            "codec": elements * codec_ns(elements, world).get(level or "", 0.0) * 1e-9}


def codec_ns(elements: int, world: int) -> dict[str, float]:
    """The codecs' host ns per element for this gradient size and world size."""
    return CODEC_NS_SMALL if elements * world < CODEC_SMALL_BELOW else CODEC_NS


def host_timing_s(part: dict[str, float], record: float, n: int, shared: float) -> float:
    """The ``auto`` host timing's real seconds: ``n`` copies at once, each importing torch,
    recording its gradient (recorded mode: ``record``, already shared by the cores),
    timing its steps and its codec."""
    step = part["forward"] + part["backward"] + part["optimizer"] + part["between"]
    timed = (TIMING_STEPS * step + TIMING_CODEC_REPS * part["codec"]) * shared
    return TIMING_IMPORT_S * max(1.0, n / cores()) + record + timed


def _host_real(model: str, dataset: str, timing: accelerator.Timing,
               elements: int | None, batch: int) -> tuple[float, float, float]:
    """A real step's forward, backward, optimizer seconds on this host (1 thread)."""
    if (model, dataset) in HOST_MEASURED:
        fwd, bwd, opt, at_batch = HOST_MEASURED[(model, dataset)]
        size = elements / HOST_MEASURED_PARAMS[model] if (
            elements and model in HOST_MEASURED_PARAMS) else 1.0
        per_batch = size * batch / at_batch
        return fwd * per_batch, bwd * per_batch, opt * size
    opt = (elements or 0) * OPTIMIZER_NS * 1e-9
    return (timing.forward_s * HOST_REAL_PER_PROFILE, timing.backward_s * HOST_REAL_PER_PROFILE,
            opt)


def estimate_runs(pairs: list[tuple[Any, str | None]],
                  cached: Callable[[tuple], bool] | None = None) -> list[dict[str, Any]]:
    """:func:`estimate` of each ``(scenario, method)`` in the order they run, the ``auto``
    host timing counted once per configuration, as the run caches it (``timing_key``), and not at
    all where ``cached(key)`` says this host holds a measurement already."""
    seen: set[tuple] = set()
    out = []
    for scenario, method in pairs:
        e = estimate(scenario, method)
        key = e.get("timing_key")
        if key is not None and (key in seen or (cached is not None and cached(key))):
            e = {**e, "seconds": e["seconds"] - e["host_timing_s"], "host_timing_s": 0.0}
        if key is not None:
            seen.add(key)
        out.append(e)
    return out


def estimate_run_s(scenario: Any, method: str | None = None) -> float:
    """Real seconds one run of ``scenario`` with ``method`` is estimated to take."""
    return float(estimate(scenario, method)["seconds"])
