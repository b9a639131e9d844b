"""StellaTrain's bandwidth-driven top-k fraction, as an adaptive method (``stellatrain``).

StellaTrain (Lim et al., "Accelerating Model Training in Multi-cluster Environments with
Consumer-grade GPUs", SIGCOMM 2024; github.com/kaist-ina/stellatrain, which carries no
licence: read, not copied) picks each iteration's gradient compression rate from the
bandwidth it measures. What this module keeps of its rate controller
(``backend/src/engine/batch_rate_alloc.py``: the telemetry's EWMA and the traffic formula;
``batch_rate_alloc_optim.py``, ``MainOptimizer.step_main`` and ``step``: the target and its
timing):

The algorithm, once
-------------------
Every iteration each worker reports its received-gradient throughput ``m`` and how long its
accelerator waited for gradients; the controller

1. smooths the goodput: ``g = 0.1 g_prev + 0.9 m`` (``ewma``: old x 0.1 + new x 0.9);
2. at a decision, takes the accelerator's waiting share ``f = wait / (wait + compute)``
   (0 when below ``wait_floor`` = 0.05), and moves the bandwidth target
   ``T = 0.9 T_prev + 0.1 g``, then ``T x 1.1`` when ``f = 0`` (nobody waits: probe up) or
   ``T x max(0.75, 1 - f)`` (back off by the share waited, at most by a quarter); the first
   decision takes ``T = g``;
3. keeps the largest fraction ``kept`` whose all-gather traffic fits the target,
   ``sum_i max(1, ceil(kept n_i)) x (value + index bytes) x 8 x (N - 1) / t_iter <= T``
   (``calculate_goodput_mbps``: every worker receives the others' sparse gradients, the
   ``n_i`` tensors' kept values and indices, within one iteration's compute ``t_iter``),
   found by bisection (20 halvings of [0, 0.999] of the dropped fraction);
4. the decision applies ``delay`` = 3 iterations after the latest one reported
   (``EFFECTIVE_AFTER_ITER``), and the next decision waits until it has been in effect for
   ``settle`` = 5 iterations (``WAIT_EFFECT_ITER_MAIN``): one decision per 8 iterations;
   the first after ``warmup`` = 4 reports (``GPU_INIT_WARMUP_THRESH``). Until then the
   engine's default rate applies: 0.99 dropped (``core.cpp``), ``start`` = 0.01 kept.

How it maps onto this testbed's step loop (``netsenseml.loop``):

* ``m``: the bytes a rank received in the step's collectives per second they were in flight
  (``Observation.bytes_sent`` and ``comm_s``, mean over ranks): an all-gather brings each
  rank the ``N - 1`` others' payloads, a ring allreduce ``2 (N - 1) / N`` of its buffer. The
  original takes the least of the workers' EWMAs; the loop hands every policy the mean.
* wait: the step's exposed communication (``exposed_s``: what it waited for after its last
  launch); compute and ``t_iter``: ``compute_s`` (the step less that wait). The original
  times forward + backward (1.5 x backward) and the gaps around them.
* ``n_i``, ``N``, value + index bytes: from the registration calibration (``needs_calibration``):
  the gradient as one tensor of ``dense_bytes / 4`` elements (the per-bucket ceilings
  differ by fewer elements than there are buckets), ``world_size``, and
  ``topk_bytes_per_element`` (fp32 values and this testbed's int32 indices, where the
  original sends uint16 indices for tensors under 65536 elements).
* timing: the loop applies a decision two steps after the step observed
  (:data:`~netsenseml.loop.DECISION_LAG`); the policy holds it ``delay - 2`` more.
* ``kept = 1`` is sent as plain fp32 allreduce (this testbed's dense path, as the
  prototype's rule does at its cap); every other fraction as top-k all-gathered (the
  hook's top-k selector, NetSenseML's too: the comparison is of the rules).

Not kept: StellaTrain's per-GPU batch-size allocation and its Bayesian-optimised profile
(every rank here trains the same batch on alike hardware), the ``1 - (1 - c) / (N - 1)``
rewrite of ``step_main`` (the (N - 1) factor is in the traffic already) and the framing
and TCP-header bytes of its ``estimate_tx_bytes`` (a few per cent). The bisection here
returns the end that fits (the original returns the other end of the last bracket, at most
2^-20 of the range off).

Pure Python (no torch), deterministic: every rank takes the same decisions from the same
mean observations.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from netsenseml.loop import DECISION_LAG
from netsenseml.policy import GATHERED, Calibration, Decision, Observation

#: Halvings of the bisection (the original's ``max_step``).
SEARCH_STEPS = 20
#: The most the original drops (``binary_search_min_cond(0, 0.999, ...)``).
MAX_DROP = 0.999


def traffic_bps(kept: float, sizes: Sequence[float], world_size: int,
                bytes_per_element: float, t_iter_s: float) -> float:
    """Bits per second each worker receives to gather the others' top-``kept`` gradients
    within one iteration of ``t_iter_s`` seconds (``calculate_goodput_mbps``, in bit/s)."""
    if t_iter_s <= 0:
        return math.inf
    elements = sum(max(1, math.ceil(kept * n)) for n in sizes)
    return elements * bytes_per_element * 8 * (world_size - 1) / t_iter_s


def fitting_fraction(target_bps: float, sizes: Sequence[float], world_size: int,
                     bytes_per_element: float, t_iter_s: float,
                     steps: int = SEARCH_STEPS) -> float:
    """The largest kept fraction in ``[1 - MAX_DROP, 1]`` whose traffic fits
    ``target_bps`` (bisection on the dropped fraction, as the original); the least when
    none fits."""
    def fits(drop: float) -> bool:
        return traffic_bps(1.0 - drop, sizes, world_size, bytes_per_element, t_iter_s) <= target_bps

    if fits(0.0):
        return 1.0
    low, high = 0.0, MAX_DROP  # the least dropped fraction that fits lies in (low, high]
    if not fits(high):
        return 1.0 - MAX_DROP
    for _ in range(steps):
        mid = low + (high - low) / 2
        if fits(mid):
            high = mid
        else:
            low = mid
    return 1.0 - high


def back_off(target_prev_bps: float, goodput_bps: float, wait_share: float,
             keep: float = 0.9, increase: float = 1.1, most: float = 0.75) -> float:
    """The next bandwidth target: ``keep T_prev + (1 - keep) g``, x ``increase`` when no
    accelerator waited (``wait_share == 0``), else x ``max(most, 1 - wait_share)``."""
    target = keep * target_prev_bps + (1.0 - keep) * goodput_bps
    return target * (increase if wait_share == 0 else max(most, 1.0 - wait_share))


def received_bps(obs: Observation, world_size: int) -> float:
    """What one rank received per second of its step's communication (module docstring);
    0 when the step sent nothing or took no time."""
    if obs.comm_s <= 0 or obs.bytes_sent <= 0 or world_size < 2:
        return 0.0
    gathered = obs.decision.level in GATHERED
    factor = (world_size - 1) if gathered else 2.0 * (world_size - 1) / world_size
    return obs.bytes_sent * factor * 8 / obs.comm_s


class StellaTrainPolicy:
    """StellaTrain's rate controller (module docstring) on one top-k fraction.

    Parameters are the original's constants: ``ewma_old`` (weight of the old goodput),
    ``target_keep`` (of the old target), ``increase``, ``most_backoff`` (the least factor of
    a back-off), ``wait_floor``, ``delay`` (iterations from the latest report to the
    decision's first), ``settle`` (iterations a decision is in effect before the next),
    ``warmup`` (reports before the first decision), ``start`` (the kept fraction until
    then).
    """

    # its traits for the step loop (``netsenseml.loop.AdaptivePolicy``)
    needs_calibration = True  # the calibration's world size, gradient size, bytes per element
    probes_rtt = False  # it senses its own transfers, not a tiny collective's RTT
    takes_samples = False
    drains_residual = False  # plain error feedback, as the original's residual
    topk_method: str | None = None  # the hook's selector (NetSenseML's too)
    half_level = "fp16"
    new_regime = False
    needs_values = False  # its decisions read times and bytes, never gradient values

    def __init__(self, *, ewma_old: float = 0.1, target_keep: float = 0.9,
                 increase: float = 1.1, most_backoff: float = 0.75, wait_floor: float = 0.05,
                 delay: int = 3, settle: int = 5, warmup: int = 4, start: float = 0.01) -> None:
        if not (0 <= ewma_old < 1 and 0 <= target_keep < 1):
            raise ValueError(f"ewma_old and target_keep must be in [0, 1), got {ewma_old}, {target_keep}")
        if increase < 1 or not 0 < most_backoff <= 1 or not 0 <= wait_floor < 1:
            raise ValueError("need increase >= 1, 0 < most_backoff <= 1, 0 <= wait_floor < 1")
        if delay < DECISION_LAG or settle < 0 or warmup < 1:
            raise ValueError(f"need delay >= {DECISION_LAG} (the loop's own lag), settle >= 0, "
                             f"warmup >= 1; got {delay}, {settle}, {warmup}")
        if not 1 - MAX_DROP <= start <= 1:
            raise ValueError(f"start must be in [{1 - MAX_DROP:g}, 1], got {start}")
        self.ewma_old, self.target_keep = ewma_old, target_keep
        self.increase, self.most_backoff, self.wait_floor = increase, most_backoff, wait_floor
        self.delay, self.settle, self.warmup = delay, settle, warmup
        self.kept = start
        self.decision = self._as_decision(start)
        self.calibration: Calibration | None = None
        self.steps = 0  # observations taken (the observation of step k is the k-th)
        self.goodput_bps: float | None = None
        self.target_bps: float | None = None
        self.wait_share = 0.0
        self.decided: list[tuple[int, float]] = []  # (observed step, kept) per decision
        self._next_decision = warmup
        self._pending: deque[tuple[int, Decision]] = deque()  # (first step, decision)

    @staticmethod
    def _as_decision(kept: float) -> Decision:
        return Decision("none") if kept >= 1.0 else Decision("topk", kept)

    # ------------------------------------------------------------------ the loop's calls
    def calibrate(self, cal: Calibration) -> Decision:
        """The job's facts (the calibration's timings are not used); the first decision."""
        self.calibration = cal
        return self.decision

    @staticmethod
    def take_counts() -> tuple[int, int]:
        return 0, 0

    def step_stats(self, decision: Decision) -> dict[str, float | int]:
        """The controller's state behind the decision (``stella_*``; bit/s as Mbit/s)."""
        del decision
        if self.target_bps is None:
            return {}
        return {"stella_target_mbit": self.target_bps * 1e-6,
                "stella_goodput_mbit": (self.goodput_bps or 0.0) * 1e-6,
                "stella_wait_share": self.wait_share}

    def observe(self, obs: Observation) -> Decision:
        """One step's mean-over-ranks observation; returns the decision for the step
        :data:`~netsenseml.loop.DECISION_LAG` after it."""
        self.steps += 1
        k = self.steps
        cal = self.calibration
        world = cal.world_size if cal is not None else 2
        measured = received_bps(obs, world)
        if measured > 0:
            self.goodput_bps = measured if self.goodput_bps is None else (
                self.ewma_old * self.goodput_bps + (1 - self.ewma_old) * measured)
        if k >= self._next_decision and self.goodput_bps is not None and cal is not None:
            self._decide(obs, cal)
        # what applies from step k + DECISION_LAG: the latest decision due by then
        while self._pending and self._pending[0][0] <= k + DECISION_LAG:
            self.decision = self._pending.popleft()[1]
        return self.decision

    def _decide(self, obs: Observation, cal: Calibration) -> None:
        assert self.goodput_bps is not None
        k = self.steps
        wait, compute = max(0.0, obs.exposed_s), max(0.0, obs.compute_s)
        share = wait / (wait + compute) if wait + compute > 0 else 0.0
        self.wait_share = 0.0 if share < self.wait_floor else share
        if self.target_bps is None:
            self.target_bps = self.goodput_bps
        else:
            self.target_bps = back_off(self.target_bps, self.goodput_bps, self.wait_share,
                                       self.target_keep, self.increase, self.most_backoff)
        self.kept = fitting_fraction(self.target_bps, (cal.dense_bytes / 4.0,), cal.world_size,
                                     cal.topk_bytes_per_element, compute)
        self.decided.append((k, self.kept))
        self._pending.append((k + self.delay, self._as_decision(self.kept)))
        self._next_decision = k + self.delay + self.settle
