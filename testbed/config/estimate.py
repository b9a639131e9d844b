"""How long one run takes on this host, before it runs: ``netsense sweep --dry-run`` and the
sweep's ETA.

A native run lasts its training time (its time limit, or steps x ``FALLBACK_STEP_S``) plus
``PER_RUN_OVERHEAD_S``. A run on the emulated accelerator lasts its **virtual** training
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
  ``benchmarks/paper_models.py`` and ``python -m workloads.pace_probe``) scaled as the
  probe's copies sharing the cores measure it (``max(1, SHARED_SLOWDOWN x n / cores)``):
  ``HOST_MEASURED`` (or
  ``HOST_REAL_PER_PROFILE`` x the profile) for real compute, the optimizer step in one slot
  with the next forward as the pacer holds them (SGD over 11.2 M parameters: 20 ms here
  against the profile's 0.3 ms would alone make a real-compute run's factor ~400 at 8
  workers); ``RECORDED_NS`` per
  gradient element for the recorded surrogate (no optimizer step), ``BETWEEN_NS`` for what
  a worker does between two steps; ``CODEC_NS`` per element per codec level. ``auto``
  also costs its probe before the run (:func:`probe_s`).

The estimate says so: ``--dry-run`` prints its basis, and the ETA of a running sweep scales
the pending estimates by how the finished runs compared with theirs.
"""

from __future__ import annotations

import os
from typing import Any

from netsenseml import accelerator, methods
from testbed.config import factor
from testbed.emulation import faithful
from workloads import registry

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
#: A real step's forward, backward and optimizer seconds on this host (1 thread, batch 32,
#: alone) where measured: benchmarks/paper_models.py (224 px) and workloads.pace_probe
#: (32 px).
HOST_MEASURED: dict[tuple[str, str], tuple[float, float, float]] = {
    ("resnet18-imagenet", "cifar100-224-synth"): (2.02, 2.73, 0.020),
    ("resnet18-imagenet", "cifar100-synth"): (0.040, 0.098, 0.020),
    ("vgg16", "cifar100-224-synth"): (28.73, 29.13, 0.639),
}
#: The optimizer's host cost per parameter where not measured (SGD with momentum, 1 thread:
#: 20 ms for 11.2 M).
OPTIMIZER_NS = 1.8
#: The recorded surrogate's forward and backward per gradient element (ns, 1 thread):
#: resnet18-imagenet 14 + 20 ms for 11.2 M, vgg16 89 + 245 ms for 134.7 M.
RECORDED_NS = {"forward": 1.3, "backward": 1.9}
#: A codec's compress + residual + decode per gradient element (ns, 1 thread, 8 ranks'
#: payloads decoded for the gathered levels): ``python -m workloads.pace_probe --model
#: resnet18-imagenet --dataset cifar100-224-synth --grads recorded --world 8`` gave fp16
#: 20 ms, int8 509 ms, exact top-k 849 ms, DGC's sampled top-k 423 ms, random-k 64 ms for
#: 11.2 M elements.
CODEC_NS = {"fp16": 1.8, "bf16": 1.8, "int8": 45.0, "topk": 76.0, "dgc": 38.0, "randomk": 5.7}
#: What a worker does between two steps, per gradient element (ns, 1 thread): the
#: gradient's health norm and the step's records (pace_probe's ``between_s``: ~23 ms for
#: ResNet-18's 11.2 M with 8 copies on 2 cores, ~2.2x alone).
BETWEEN_NS = 0.95
#: How much slower a part runs with ``n`` one-thread copies on ``cores`` cores than alone,
#: per ``n / cores``: the probe's 8 copies on this 2-core host timed the surrogate's
#: passes and the codecs 2.1-2.3x their one-copy times, not 4x (they do not all compute
#: at once); the factors ``auto`` chose in the committed paper-scale runs fit 0.65 best.
SHARED_SLOWDOWN = 0.65
#: The probe (``workloads.pace_probe``): warm-up and timed steps, and codec repetitions
#: (one warm-up and three timed), as ``testbed.orchestration.dilation`` runs it; plus
#: each copy's interpreter and torch import (CPU seconds, shared by the cores).
PROBE_STEPS = 14
PROBE_CODEC_REPS = 4
PROBE_IMPORT_S = 3.0
#: What the estimate assumes an adaptive method sends (NetSenseML's floor, where it sat at
#: every constrained rate of the paper-scale runs), PowerSGD's share of the gradient and
#: its dense first steps (``start_powerSGD_iter``, hooks.powersgd_state).
ADAPTIVE_AS = "topk:0.005"
POWERSGD_SHARE = 0.01
POWERSGD_DENSE_STEPS = 2


def cores() -> int:
    return max(1, os.cpu_count() or 1)


def _level(method: str) -> tuple[str | None, float, str]:
    """(codec level, wire share of fp32, reduction) of the bytes a method sends."""
    spec = methods.parse(method)
    if spec.kind == "adaptive":
        spec = methods.parse(ADAPTIVE_AS)
    info = methods.get(spec.name) if spec.name in methods.names() else None
    if info is None or info.wire is None:  # PowerSGD, plug-ins: a low-rank share
        return None, POWERSGD_SHARE, "allreduce"
    ratio = spec.arg if isinstance(spec.arg, int | float) and info.arg == "ratio" else 1.0
    level = None if spec.name == "allreduce" else info.label
    return level, methods.bytes_ratio(info.label, ratio), info.reduction or "allreduce"


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _native(scenario: Any) -> dict[str, Any]:
    limit = _get(scenario, "workload.time_limit_s")
    steps = _get(scenario, "workload.steps")
    train = float(limit) if limit else float(steps) * FALLBACK_STEP_S if steps else 30.0
    return {"seconds": train + PER_RUN_OVERHEAD_S, "k": 1.0, "virtual_s": train}


def estimate(scenario: Any, method: str | None = None) -> dict[str, Any]:
    """``seconds`` (real, the whole run), ``k`` (the factor assumed), ``virtual_s`` (the
    training time on the run's clock), ``step_s`` (virtual, when estimated) and
    ``probe_s`` (the ``auto`` probe's real seconds before the run, in ``seconds``)."""
    acc = getattr(scenario, "accelerator", None)
    if acc is None or not hasattr(scenario, "world_size"):
        return _native(scenario)
    wl = scenario.workload
    try:
        timing = acc.timing(wl.model, wl.knobs(), wl.batch_size)
    except accelerator.ProfileError:
        return _native(scenario)
    n = scenario.world_size
    elements = registry.param_count(wl.model, wl.knobs(), wl.dataset) or 0
    level, share, reduction = _level(method or "allreduce")
    mb = 4 * elements / 1e6
    codec_v = timing.codec_s(level, int(mb * 1e6)) if level else 0.0
    rates = faithful.training_rates(scenario.model_dump(mode="json"))

    def comm(share: float) -> float:
        if not (elements and rates and min(rates) > 0):
            return 0.0
        payload = 4 * elements * share
        sent = 2 * (n - 1) / n * payload if reduction == "allreduce" else (n - 1) * payload
        return sent * 8 / (min(rates) * 1e6)

    step_v = timing.step_s + codec_v + comm(share)
    limit, steps = wl.time_limit_s, wl.steps
    virtual = float(limit) if limit else float(steps or 0) * step_v
    if not limit and steps and methods.parse(method or "allreduce").name == "powersgd":
        dense = min(int(steps), POWERSGD_DENSE_STEPS)  # torch's hook: plain allreduce first
        virtual += dense * (comm(1.0) - comm(share))
    shared = max(1.0, SHARED_SLOWDOWN * n / cores())
    fwd, bwd, opt = _host_real(wl.model, wl.dataset, timing, elements)
    record = (fwd + bwd) * max(1.0, n / cores()) if wl.grads == "recorded" else 0.0
    probe = 0.0
    if acc.dilation != "auto":
        k = float(acc.dilation)
    elif wl.grads == "payload":  # nothing real is timed: no probe, no recording
        record = 0.0
        k = max(factor.rate_factor(max(rates, default=0.0)), factor.round_up(
            factor.payload_need(timing, elements, n, cores(), acc.margin, wl.threads)))
    else:
        part = _host_parts(wl.grads, fwd, bwd, opt, elements, level)
        # the parts as the probe would time them, for the rule auto applies to its probe's
        real = {"forward_s": part["forward"] * shared, "backward_s": part["backward"] * shared,
                "optimizer_s": part["optimizer"] * shared, "between_s": part["between"] * shared,
                "codec_s": {level: part["codec"] * shared} if level else {},
                "elements": elements, "processes": n, "threads": wl.threads, "cores": cores(),
                # CPU seconds of a whole step and of the codec, one copy (lockstep_need)
                "step_cpu_s": part["forward"] + part["backward"] + part["optimizer"]
                + part["between"]}
        k = max(factor.rate_factor(max(rates, default=0.0)),
                factor.least_factor(timing, real, acc.margin))
        probe = probe_s(part, record, n, shared)
    return {"seconds": virtual * k + PER_RUN_OVERHEAD_S + record + probe, "k": k,
            "virtual_s": virtual, "step_s": step_v, "probe_s": probe}


def _host_parts(grads: str, fwd: float, bwd: float, opt: float, elements: int,
                level: str | None) -> dict[str, float]:
    """One worker's real seconds per step part, alone on a core (1 thread)."""
    if grads == "recorded" and elements:  # the surrogate; no optimizer step
        fwd = elements * RECORDED_NS["forward"] * 1e-9
        bwd = elements * RECORDED_NS["backward"] * 1e-9
        opt = 0.0
    return {"forward": fwd, "backward": bwd, "optimizer": opt,
            "between": elements * BETWEEN_NS * 1e-9,
            "codec": elements * CODEC_NS.get(level or "", 0.0) * 1e-9}


def probe_s(part: dict[str, float], record: float, n: int, shared: float) -> float:
    """The ``auto`` probe's real seconds: ``n`` copies at once, each importing torch,
    recording its gradient (recorded mode: ``record``, already shared by the cores),
    timing its steps and its codec."""
    step = part["forward"] + part["backward"] + part["optimizer"] + part["between"]
    timed = (PROBE_STEPS * step + PROBE_CODEC_REPS * part["codec"]) * shared
    return PROBE_IMPORT_S * max(1.0, n / cores()) + record + timed


def _host_real(model: str, dataset: str, timing: accelerator.Timing,
               elements: int | None) -> tuple[float, float, float]:
    """A real step's forward, backward, optimizer seconds on this host (1 thread)."""
    if (model, dataset) in HOST_MEASURED:
        return HOST_MEASURED[(model, dataset)]
    opt = (elements or 0) * OPTIMIZER_NS * 1e-9
    return (timing.forward_s * HOST_REAL_PER_PROFILE, timing.backward_s * HOST_REAL_PER_PROFILE,
            opt)


def estimate_run_s(scenario: Any, method: str | None = None) -> float:
    """Real seconds one run of ``scenario`` with ``method`` is estimated to take."""
    return float(estimate(scenario, method)["seconds"])
