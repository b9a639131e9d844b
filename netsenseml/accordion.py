"""Accordion's critical-regime rule, as an adaptive method (``accordion``).

Accordion (Agarwal, Wang, Lee, Venkataraman, Papailiopoulos, "Adaptive Gradient
Communication via Critical Learning Regime Identification", MLSys 2021;
github.com/uw-mad-dash/Accordion, which carries no licence: read, not copied) compresses
lightly while training is in a *critical regime* -- when the gradient changes fast -- and
heavily otherwise. What this module keeps (``auto_scale.py`` / ``auto_scale_topk.py``:
``run_auto_scale_gng``; ``main.py``: the accumulation, the interval and the decay rule):

The algorithm, once
-------------------
Every ``interval``, per layer, with ``n_prev`` and ``n_now`` the norms of the gradient
accumulated over the previous and the current interval:

* ``r = |n_prev - n_now| / n_prev`` (``n_prev = 0``: a change as large as any);
* ``r >= threshold`` (0.5) -> the *light* level (the critical regime), else the *heavy*
  one (top-k: 99 % / 10 % kept in ``auto_scale_topk.py``; PowerSGD: rank 2 / rank 1);
* the first interval (no ``n_prev``) and every learning-rate decay force light for all
  layers (the next interval's check decides again).

How it maps onto this testbed:

* **Per DDP bucket, not per layer.** The hooks compress a bucket as one flat buffer
  (``netsenseml.hooks``), so a level per layer would split every bucket; a bucket is the
  unit the hook can give its own level (``Decision.for_bucket``), and its norm is that of
  its layers' accumulated gradients together. With one bucket (a small model) the rule
  acts on the whole gradient. The original also left 1-D tensors (biases, norms)
  uncompressed; here they travel with their bucket.
* **The norms** come from the hook (``netsenseml.gradnorms.GradNorms``: each rank's local,
  uncompressed gradient summed per parameter over the window, a bucket's norm at the
  window's end), averaged over ranks on the next step's bucket-0 collective
  (``netsenseml.loop``): every rank decides the same from the same mean. The original read
  rank 0's own sums and broadcast its decision.
* **The interval** is ``interval`` steps (default 20: the testbed's runs train a few
  hundred steps, the paper's 300 epochs had 30 checks, 10 epochs apart), the accumulation
  the whole interval (the original summed the last epoch of each 10). The first check can
  compare only at the end of the second interval, so light holds through two.
* **The levels** are two of this testbed's ladder, ``light`` = ``none`` and ``heavy`` =
  ``topk:0.1`` by default. Light: the paper's 99 % top-k keeps all but 1 % and sends a
  value and an index for each (1.98x the fp32 bytes); fp32 allreduce keeps everything for
  fewer bytes, so the ladder's least reduction stands in for it. Heavy: the paper's 10 %
  top-k is on the ladder as it is. Any two ladder levels may be given
  (``light="fp16"``, ``heavy="int8"``: the PowerSGD pair's 2x step is closer to fp16/int8).
* **Learning-rate decays**: the steps from which the job's learning rate is lower
  (``lr_decay_steps``, e.g. a MultiStepLR's milestones in steps); every bucket is light
  from that step on until the next check. The testbed's worker keeps one learning rate,
  so there this never fires.

A step's record shows the heavy level (and its ratio) when any bucket sent it, else the
light one; ``kept_ratio`` is what the buckets together kept, and ``accordion_heavy_buckets``
/ ``accordion_buckets`` how many went heavy.

Pure Python (no torch), deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from netsenseml import methods
from netsenseml.loop import DECISION_LAG
from netsenseml.policy import Calibration, Decision, Observation


@dataclass(frozen=True)
class BucketDecisions(Decision):
    """A step's decision with a level per bucket; ``level``/``ratio`` summarise it for
    the step's record. Buckets beyond ``buckets`` (a layout not checked yet) send
    ``rest``."""

    buckets: tuple[Decision, ...] = ()
    rest: Decision | None = None

    def for_bucket(self, index: int) -> Decision:
        if 0 <= index < len(self.buckets):
            return self.buckets[index]
        return self.rest if self.rest is not None else Decision(self.level, self.ratio)


def change_ratios(prev: Sequence[float], now: Sequence[float]) -> list[float]:
    """``|n_prev - n_now| / n_prev`` per bucket (``inf`` where ``n_prev`` is 0)."""
    return [abs(p - n) / p if p != 0 else math.inf for p, n in zip(prev, now, strict=True)]


def heavy_buckets(prev: Sequence[float] | None, now: Sequence[float],
                  threshold: float = 0.5) -> list[bool]:
    """Per bucket, whether it goes heavy: its norm changed by less than ``threshold``.
    No previous interval (or another bucket layout): every bucket light."""
    if prev is None or len(prev) != len(now):
        return [False] * len(now)
    return [r < threshold for r in change_ratios(prev, now)]


def ladder_decision(text: str) -> Decision:
    """``"none"``, ``"fp16"``, ``"int8"``, ``"topk:0.1"``... as a decision; a ValueError
    for anything that is not a level of the ladder."""
    spec = methods.parse(text)
    if spec.info is None or not spec.info.ladder:
        labels = ", ".join(i.form for i in methods.ladder())
        raise ValueError(f"{text!r} is not a ladder level ({labels})")
    return Decision(spec.info.label, spec.ratio if spec.ratio is not None else 1.0)


class AccordionPolicy:
    """Accordion's light/heavy rule per bucket (module docstring).

    ``interval``: steps per window of accumulated gradient; ``threshold``: the relative
    change of its norm at or above which a bucket is in a critical regime; ``light`` /
    ``heavy``: ladder levels (``"none"``, ``"topk:0.1"``); ``lr_decay_steps``: the steps
    from which the learning rate is lower.
    """

    # its traits for the step loop (``netsenseml.loop.AdaptivePolicy``)
    needs_calibration = False  # no registration calibration: it starts light
    probes_rtt = False  # it senses no network
    takes_samples = False
    drains_residual = False  # plain error feedback, as the original's memory
    topk_method: str | None = None  # the hook's selector (NetSenseML's too)
    half_level = "fp16"
    new_regime = False
    needs_values = True  # its decisions read gradient norms: no run without real values

    def __init__(self, *, interval: int = 20, threshold: float = 0.5, light: str = "none",
                 heavy: str = "topk:0.1", lr_decay_steps: Sequence[int] = ()) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be an integer >= 1 (steps), got {interval!r}")
        if not (isinstance(threshold, int | float) and 0 < threshold < math.inf):
            raise ValueError(f"threshold must be a positive number, got {threshold!r}")
        self.grad_norm_every = interval  # the hook's window (``netsenseml.loop``)
        self.threshold = float(threshold)
        self.light, self.heavy = ladder_decision(light), ladder_decision(heavy)
        steps = tuple(int(s) for s in lr_decay_steps)
        if any(s < 1 for s in steps):
            raise ValueError(f"lr_decay_steps must be steps >= 1, got {list(lr_decay_steps)}")
        self.lr_decay_steps = steps
        self.steps = 0  # observations taken (the observation of step k is the k-th)
        self.norms: tuple[float, ...] | None = None  # the last window's, per bucket
        self.ratios: list[float] = []  # the last check's change per bucket
        self.heavy_now: list[bool] = []
        self.checks: list[tuple[int, tuple[bool, ...]]] = []  # (observed step, heavy per bucket)
        self.forced: list[int] = []  # observed steps at which a decay forced light
        self.decision: Decision = self._decision([])

    # ------------------------------------------------------------------ decisions
    def _decision(self, heavy: list[bool]) -> BucketDecisions:
        per = tuple(self.heavy if h else self.light for h in heavy)
        summary = self.heavy if any(heavy) else self.light
        return BucketDecisions(summary.level, summary.ratio, buckets=per, rest=self.light)

    def levels(self) -> list[str]:
        """Per bucket, ``"light"`` or ``"heavy"`` as decided last (empty before a check)."""
        return ["heavy" if h else "light" for h in self.heavy_now]

    # ------------------------------------------------------------------ the loop's calls
    def calibrate(self, cal: Calibration) -> Decision:
        """No registration calibration (``needs_calibration`` is False): the first decision."""
        del cal
        return self.decision

    @staticmethod
    def take_counts() -> tuple[int, int]:
        return 0, 0

    def step_stats(self, decision: Decision) -> dict[str, float | int]:
        """How many buckets ``decision`` (the one in use) sends heavy, of how many."""
        buckets = getattr(decision, "buckets", ())
        heavy = sum(1 for d in buckets if d == self.heavy and self.heavy != self.light)
        return {"accordion_heavy_buckets": heavy, "accordion_buckets": len(buckets)}

    def observe(self, obs: Observation) -> Decision:
        """One step's mean-over-ranks observation; at a window's end (``grad_norms``) the
        check, and at a learning-rate decay every bucket light (applied from the decay's
        step: the loop applies a decision :data:`~netsenseml.loop.DECISION_LAG` steps after
        the step observed)."""
        self.steps += 1
        if obs.grad_norms:
            now = tuple(float(x) for x in obs.grad_norms)
            self.heavy_now = heavy_buckets(self.norms, now, self.threshold)
            self.ratios = (change_ratios(self.norms, now)
                           if self.norms is not None and len(self.norms) == len(now) else [])
            self.norms = now
            self.checks.append((self.steps, tuple(self.heavy_now)))
            self.decision = self._decision(self.heavy_now)
        if any(s - DECISION_LAG == self.steps for s in self.lr_decay_steps):
            self.heavy_now = [False] * len(self.heavy_now)
            self.forced.append(self.steps)
            self.decision = self._decision(self.heavy_now)
        return self.decision
