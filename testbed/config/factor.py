"""The rule that sets a run's time-dilation factor ``k``: one place for ``dilation: auto``
(``testbed.orchestration.dilation``, which measures the host's parts) and for the estimate
before a run (``testbed.config.estimate``, which models them from stated figures).

``k`` is the larger of two needs:

* **the host's**: ``margin`` x the largest ratio of the host's real work for a part of the
  step to that part's profiled slot (:func:`host_need`, with the ranks' whole-step CPU in
  lockstep, :func:`lockstep_need`); in payload mode, where the host computes nothing, the
  hook's bookkeeping per step and bucket against the step (:func:`payload_need`) and the
  collectives' own host cost against the step (:func:`collective_need`);
* **the network's**: the least ``k`` that brings the fastest rate training crosses into
  the emulation's faithful range (:func:`rate_factor`, ``testbed.config.faithful``).

Both are rounded up to two significant digits (:func:`round_up`). Torch-free: the
orchestrator and the estimate import it without paying for torch.
"""

from __future__ import annotations

import math
from typing import Any

from netsenseml import accelerator, methods
from netsenseml.dilation import Dilation
from testbed.config import faithful


def least_factor(timing: accelerator.Timing, real: dict[str, Any], margin: float) -> float:
    """The least ``k`` at which each real part x ``margin`` fits its profiled slot
    (:func:`host_need`), rounded up to two significant digits."""
    return round_up(host_need(timing, real, margin))


def host_need(timing: accelerator.Timing, real: dict[str, Any], margin: float) -> float:
    """``margin`` x the largest ratio of a real part to its profiled slot (unrounded).

    Parts: the optimizer step with what the worker does between steps (the next batch, its
    records) and the next forward pass (one slot: the pacer lets the device run them back
    to back); the same without the optimizer (a step after an evaluation starts its own
    slot); the backward pass with the costliest codec the method uses (released bucket by
    bucket, so the two share one slot); and the whole step's CPU work with the ranks in
    lockstep (:func:`lockstep_need`).
    """
    codec_real = real.get("codec_s", {}) or {}
    mb = 4 * int(real.get("elements", 0)) / 1e6
    backward = [(real["backward_s"], timing.backward_s)]
    for level, seconds in codec_real.items():
        backward.append((real["backward_s"] + seconds,
                         timing.backward_s + timing.codec_s_per_mb.get(level, 0.0) * mb))
    between = real.get("between_s", 0.0) + PER_STEP_BOOKKEEPING_S
    ratios = [(real["optimizer_s"] + between + real["forward_s"])
              / (timing.optimizer_s + timing.forward_s),
              (between + real["forward_s"]) / timing.forward_s,
              max(r / p for r, p in backward), lockstep_need(timing, real, mb)]
    return margin * max(ratios)


def per_core(workers: int, threads: int, cores: int) -> float:
    """The workers' threads per core, at least 1: how much slower a worker's real work runs
    than alone (the cores shared evenly once all are busy)."""
    return max(1.0, workers * max(threads, 1) / max(cores, 1))


def lockstep_need(timing: accelerator.Timing, real: dict[str, Any], mb: float) -> float:
    """The ratio at which the ranks' CPU work of a whole step fits its slots when they all
    want the cores at once, as they do after each collective: the step's CPU seconds (with
    the costliest codec) x the workers per core, against the step's slots.

    The parts' wall medians miss this when the parts are short: a part of a few ms often
    runs within one time slice, so its median shows an idle core while, in the run, every
    rank starts its forward pass together. 0 where the host timing gave no CPU seconds."""
    cpu = real.get("step_cpu_s")
    if cpu is None:
        return 0.0
    shared = per_core(int(real.get("processes", 1)), int(real.get("threads", 1)),
                      int(real.get("cores", 1)))
    slot = timing.optimizer_s + timing.forward_s + timing.backward_s
    need = [(cpu + PER_STEP_BOOKKEEPING_S) / slot]
    for level, seconds in (real.get("codec_cpu_s") or {}).items():
        need.append((cpu + PER_STEP_BOOKKEEPING_S + seconds)
                    / (slot + timing.codec_s_per_mb.get(level, 0.0) * mb))
    return shared * max(need)


#: The worker's own work per step that the host timing does not time (its records, the hook's statistics
#: and TCP_INFO reads, the watchdog), measured in paced runs of the crossover workload on
#: the 2-core build machine as what remained of a step's lateness after the timed parts.
PER_STEP_BOOKKEEPING_S = 0.002


def rate_factor(mbit: float, limit: float | None = None) -> float:
    """The least ``k`` that brings a virtual rate of ``mbit`` to at most ``limit`` real
    (default: the faithful range)."""
    return max(1.0, round_up(mbit / (faithful.faithful_mbit() if limit is None else limit)))


def workers_within(need: float, k: float, workers: int, threads: int, cores: int) -> int:
    """The most workers whose real work still fits its slots at factor ``k``, from
    ``need`` (:func:`host_need`) measured with ``workers`` copies at once.

    The rule (DESIGN.md's, for compute on the emulating machine): a worker's real compute
    time grows with ``max(1, n x threads / cores)``, the cores shared evenly once they are
    all busy; below that it stays as measured (memory bandwidth and the shaping's softirq
    are not in it: the margin covers them)."""
    cores, threads = max(int(cores), 1), max(int(threads), 1)
    measured_share = per_core(workers, threads, cores)
    slot_real = Dilation(k).real_s(1.0)  # a virtual second of slot, in real seconds
    growth = slot_real * measured_share / need  # how much slower a worker may get and fit
    return max(int(math.floor(growth * cores / threads + 1e-9)), 0)


def round_up(need: float) -> float:
    """A factor of at least ``need``, up to two significant digits (it reads well in a record)."""
    if need <= 1:
        return 1.0
    exp = math.floor(math.log10(need)) - 1
    # the digits as an integer first: 12 * 0.1 would read 1.2000000000000002 in a record
    return float(round(math.ceil(need / 10 ** exp - 1e-9) * 10 ** exp, max(-exp, 0)))


#: Payload mode's host work (``workloads.payload``): per step the worker's loop, records
#: and the hook's statistics, per bucket the hook's bookkeeping and the collective's launch
#: and completion (gloo's threads copying the bytes compete for the same cores). Measured
#: with 8 ranks of ResNet-18 on this 2-core host: at k = 1 a step of its 20 ms profile
#: ran late on ~half the steps (loopback, where gloo's copying is densest), at 2 rarely.
PAYLOAD_STEP_S = 0.003
PAYLOAD_BUCKET_S = 0.001
#: DDP's bucket cap (bytes): the payload layout's buckets, counted without building it.
BUCKET_BYTES = 25 * 1024 * 1024


def payload_buckets(elements: int) -> int:
    """About how many buckets DDP makes of ``elements`` fp32 gradients: the first of 1 MiB,
    then 25 MiB each (a parameter larger than the cap is a bucket of its own, so a model
    with such a layer has fewer)."""
    return 1 + math.ceil(4 * max(int(elements), 0) / BUCKET_BYTES)


def payload_need(timing: accelerator.Timing, elements: int, workers: int, cores: int,
                 margin: float, threads: int = 1, transfer_s: float = 0.0,
                 max_overrun: float = 0.0) -> float:
    """Payload mode's host need (unrounded): the least ``k`` at which the hook's real work
    per step (``margin`` x (:data:`PAYLOAD_STEP_S` + :data:`PAYLOAD_BUCKET_S` a bucket) x
    the workers per core, ``W``) adds at most ``max_overrun`` to the step.

    Nothing else real happens in a step, and the work is due in the profiled compute slot
    ``c`` (the buckets are released in the backward); what does not fit makes the step
    late by ``W - k c`` real seconds, of a step of ``k (c + transfer_s)``. So
    ``k >= W / (c + max_overrun (c + transfer_s))``: where the network sets the step
    (``transfer_s``, the least transfer the run can see: :func:`transfer_s`), the host's
    lateness is a small share of it and ``k`` stays near 1, keeping the real rates at the
    virtual ones (the ring's efficiency on the emulated links depends on the real rate,
    not on ``k``: results/README.md). With ``max_overrun`` 0 the work must fit the slot."""
    work = margin * per_core(workers, threads, cores) * (
        PAYLOAD_STEP_S + PAYLOAD_BUCKET_S * payload_buckets(elements))
    return work / (timing.step_s + max_overrun * (timing.step_s + max(transfer_s, 0.0)))


#: Payload mode's host cost of one collective (real seconds, per worker sharing a core):
#: gloo's ring passes ``2 (W - 1)`` messages one after another, each waking the next rank's
#: process, and with 8 ranks on 2 cores each wake-up waits for a core. It is real time
#: whatever ``k`` is, so it reaches the step as ``cost / k`` of virtual time. Measured as the
#: emulated step's excess over the simulated one (results/README.md, "The collectives' host
#: cost"): ResNet-18's PowerSGD (9 collectives a step, 25 ms virtual) lost 12-14 ms real a
#: collective at k 3 and at k 10 alike (at 1000 Mbit/s: k 3 3050-3350 samples/s, k 30
#: 9340-9430, k 100 9800-9940; the simulation 10195), GPT-2's (39 a step) 16 ms at k 1.
PAYLOAD_COLLECTIVE_S = 0.0035
#: The collectives of a step whose host cost is not hidden, for a method whose buckets take
#: one collective each: DDP launches each bucket's as the backward releases it, so only the
#: last ones wait after it (measured: 0.7-1.4 collectives' cost in ResNet-18's top-k and
#: allreduce steps). A method whose bucket takes several, each launched when the one before
#: completed (PowerSGD), waits on all of them.
EXPOSED_COLLECTIVES = 2
#: The share of a step (virtual: its compute and its least transfer) the exposed
#: collectives' host cost may take (:func:`collective_need`).
COLLECTIVE_SHARE = 0.04


def exposed_collectives(elements: int, per_bucket: int) -> int:
    """The collectives of a step whose host cost the step waits on (:data:`EXPOSED_COLLECTIVES`;
    every one where a bucket's are chained, ``per_bucket`` > 1)."""
    if per_bucket > 1:
        return payload_buckets(elements) * per_bucket
    return min(EXPOSED_COLLECTIVES, payload_buckets(elements))


def collective_need(timing: accelerator.Timing, elements: int, workers: int, cores: int,
                    per_bucket: int, transfer_s: float = 0.0, threads: int = 1) -> float:
    """The least ``k`` (unrounded) at which the exposed collectives' real host cost per step
    (:func:`exposed_collectives` x :data:`PAYLOAD_COLLECTIVE_S` x the workers per core) is
    at most :data:`COLLECTIVE_SHARE` of the step (``timing.step_s`` and ``transfer_s``,
    virtual). Only the exposed ones: a larger ``k`` also lowers the real rates (below ~300
    Mbit/s real an 8-rank ring on hosts set to BBR loses throughput of its own,
    results/simulation/ring-loss.md), so the factor is raised only for what the step waits on (GPT-2's top-k 0.01 at 1 Gbit/s:
    358.6 samples/s at k 3.4, 331.8 at k 13; the simulation 367.6)."""
    cost = (exposed_collectives(elements, per_bucket) * PAYLOAD_COLLECTIVE_S
            * per_core(workers, threads, cores))
    step = timing.step_s + max(transfer_s, 0.0)
    return cost / (COLLECTIVE_SHARE * step) if step > 0 else 1.0


def payload_factor(timing: accelerator.Timing, elements: int, workers: int, cores: int,
                   margin: float, threads: int, max_overrun: float, rates: list[float],
                   method: Any) -> float:
    """Payload mode's host need for ``method`` (a spec, or text entering here), rounded
    (:func:`payload_need`, :func:`collective_need` with its collectives a bucket), against
    the least transfer the run can see: its bytes (:func:`wire_share`) at the fastest rate
    training crosses; an all-gather's also keeps that rate's real link at most
    :data:`GATHER_REAL_MBIT`. One place for ``auto`` and the estimate."""
    _, share, reduction = wire_share(method)
    fastest = max(rates, default=0.0)
    least = transfer_s(elements, workers, fastest, share, reduction)
    k = round_up(max(
        payload_need(timing, elements, workers, cores, margin, threads, least, max_overrun),
        collective_need(timing, elements, workers, cores, per_bucket(method), least, threads)))
    if reduction != "allreduce":
        k = max(k, rate_factor(fastest, GATHER_REAL_MBIT))
    return k


#: The fastest real rate a link runs at under an all-gather (a per-rank payload: int8,
#: top-k, DGC, the adaptive methods' sparse levels) in payload mode: gloo's ring
#: all-gather costs this host per byte what its allreduce does not. GPT-2's int8 (125 MB a
#: rank) moved at 0.78 of the link's rate at 1 Gbit/s real (k 1 at 1 Gbit/s and k 10 at
#: 10 Gbit/s alike) and ran late on most steps, 0.89-0.92 at 200-300 Mbit/s real, where
#: allreduce kept 0.92-0.94 at all of them (the paper grid's GPT-2 star, results/README.md).
GATHER_REAL_MBIT = 300.0


#: What an adaptive method is assumed to send where one number is needed (the estimate,
#: the least transfer of a run): the level NetSenseML holds at constrained rates.
ADAPTIVE_AS = "topk:0.005"
#: PowerSGD's (and a plug-in's) wire share of fp32 when its rank is not known: low rank.
POWERSGD_SHARE = 0.01
_ADAPTIVE_SPEC = methods.parse(ADAPTIVE_AS)


def wire_share(method: Any) -> tuple[str | None, float, str]:
    """``(codec level, wire share of fp32, reduction)`` of the bytes ``method`` (a spec, or
    text entering here) sends."""
    spec = methods.as_spec(method)
    if spec.kind == "adaptive":
        spec = _ADAPTIVE_SPEC
    if spec.wire is None:  # PowerSGD, plug-ins: a low-rank share
        return None, POWERSGD_SHARE, "allreduce"
    return None if spec.reference else spec.label, spec.wire, spec.collective or "allreduce"


def per_bucket(method: Any) -> int:
    """The collectives a bucket of ``method`` takes a step (``MethodSpec.collectives``), what
    :func:`collective_need` counts."""
    return methods.as_spec(method).collectives


def transfer_s(elements: int, workers: int, mbit: float, share: float, reduction: str) -> float:
    """One step's transfer over the ring at ``mbit`` per link (closed form, no latency): an
    allreduce sends ``2 (n-1)/n`` of the payload, an all-gather ``n-1`` copies of it."""
    if not (elements and mbit and mbit > 0 and workers > 1):
        return 0.0
    payload = 4 * elements * share
    n = workers
    sent = 2 * (n - 1) / n * payload if reduction == "allreduce" else (n - 1) * payload
    return sent * 8 / (mbit * 1e6)


def codec_specs(method: Any) -> list[str]:
    """The compressors a method can run in its hook (the codecs ``auto`` must time), as the
    host timing's ``--codecs`` takes them (``workloads.host_timing``; ``MethodSpec.codecs``;
    text is parsed once here)."""
    return [str(c) for c in methods.as_spec(method).codecs()]


def timing_key(scn: Any, method: Any) -> tuple:
    """What ``auto``'s host timing measures depends on (not the profile or the margin): one
    measurement per key, cached (``testbed.orchestration.dilation``); the estimate counts
    the host timing once per key."""
    wl = scn.workload
    return (wl.model, tuple(sorted(wl.knobs().items())), wl.batch_size, wl.dataset, wl.grads,
            tuple(codec_specs(method)), scn.world_size, wl.threads)
