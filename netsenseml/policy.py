"""The NetSenseML adaptive data-reduction policy: how much to send at the next step.

Two parts, both pure Python and deterministic (every rank feeds them the same reduced
observation, so every rank takes the same decision):

**(a) The BDP rule** (:class:`BDPRule`), as in the paper's prototype. With the monitor's BDP
(windowed max delivery rate x windowed min RTT) and the payload of a step in flight:

* payload > ``bdp_gain`` x BDP (0.9)  ->  kept fraction x ``decrease`` (0.95), floor 0.005
* otherwise                           ->  kept fraction + ``increase`` (0.001), ceiling 1.0

**(b) The level ladder** (:class:`NetSensePolicy`): ``none -> fp16 -> int8 -> topk(r)``.
The policy compresses only when communication, not compute, holds the step back: a step is
*comm-bound* when its measured comm time exceeds ``comm_bound_factor`` x its compute time.
The compute time is the minimum over the last ``compute_window`` observations (like BBR's
min RTT): the hook can only measure it as step period minus exposed comm, which also counts
whatever else the job does between steps -- its own collectives (metrics, evaluation, a
time-limit check), data-loading stalls. Those only ever add time and, on a congested link,
a small collective waits behind the queue, so a plain per-step value would call a
congested step compute-bound.

* Below top-k: after ``up_patience`` comm-bound steps in a row the policy moves up. With
  ``jump`` (default) it goes straight to the first level whose predicted comm time fits
  (``comm_bound_factor`` x compute; prediction = measured comm time x the bytes ratio of
  the two levels), or to top-k with the fraction predicted the same way (clamped to
  [``floor``, ``topk_start_ratio``]) when no dense level fits; without ``jump`` it climbs
  one level per step and top-k starts at ``topk_start_ratio``. The prediction ignores the
  latency, which does not shrink with the bytes, so a jump errs on the side of too little
  compression and the next comm-bound step finishes the move.
* At top-k the kept fraction is steered by both signals: it shrinks whenever the step is
  comm-bound -- by the paper's x ``decrease`` near the target and, with ``jump``, by up to
  x ``max_cut`` per step in proportion to compute / comm when the comm time is far above
  it (a 10x rate drop then costs two or three slow steps, not the ~45 steps that x0.95
  needs) -- and grows by ``increase`` only when the step is not comm-bound *and* the BDP
  rule sees no queue (payload <= ``bdp_gain`` x BDP); otherwise it holds. The BDP check is not a condition for shrinking: the monitor's min RTT comes
  from the collectives themselves, and with one equally sized collective per step (top-k
  at an agreed k sends no small probe) min RTT and max rate come from the same samples,
  so the BDP tracks the payload and the rule would never see congestion -- the measured
  comm time does.
* Any level moves one level down after ``down_patience`` steps in a row in which the
  comm time predicted for the lower level (measured comm time scaled by the bytes ratio,
  an over-estimate because latency does not scale) stays below ``release_factor`` x
  compute time. ``release_factor < comm_bound_factor`` is the hysteresis that keeps a
  steady link from flipping between two levels.

Bytes per level relative to fp32: none 1, fp16/bf16 0.5, int8 0.25, top-k(r) 2r (fp32
values + int32 indices).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

LADDER: tuple[str, ...] = ("none", "fp16", "int8", "topk")


def bytes_ratio(level: str, ratio: float) -> float:
    """Wire bytes of a level relative to the fp32 gradient."""
    return {"none": 1.0, "fp16": 0.5, "bf16": 0.5, "int8": 0.25}.get(level, 2.0 * ratio)


@dataclass
class BDPRule:
    """The paper's multiplicative-decrease / additive-increase rule on the kept fraction."""

    bdp_gain: float = 0.9
    decrease: float = 0.95
    increase: float = 0.001
    floor: float = 0.005
    ceiling: float = 1.0
    ratio: float = 1.0

    def congested(self, inflight_bytes: float, bdp: float) -> bool:
        return inflight_bytes > self.bdp_gain * bdp

    def shrink(self, factor: float | None = None) -> float:
        """Multiplies the fraction by ``factor`` (default ``decrease``), floored at ``floor``."""
        self.ratio = max(self.floor, self.ratio * (self.decrease if factor is None else factor))
        return self.ratio

    def grow(self) -> float:
        self.ratio = min(self.ceiling, self.ratio + self.increase)
        return self.ratio

    def update(self, inflight_bytes: float, bdp: float) -> float:
        """One step of the faithful rule; returns the new kept fraction."""
        return self.shrink() if self.congested(inflight_bytes, bdp) else self.grow()


@dataclass(frozen=True)
class Observation:
    """What one step measured (already reduced across ranks).

    ``comm_s``: seconds collectives were in flight; ``compute_s``: the rest of the step
    period; ``inflight_bytes``: payload of the step; ``bdp``: monitor's BDP in bytes
    (``None`` before the monitor has samples).
    """

    comm_s: float
    compute_s: float
    inflight_bytes: float
    bdp: float | None


@dataclass(frozen=True)
class Decision:
    level: str
    ratio: float  # kept fraction for top-k; 1.0 for dense levels


class NetSensePolicy:
    """The level ladder with the BDP rule at its top (see module docstring).

    ``mode="bdp"`` runs rule (a) alone: top-k with the BDP-rule fraction ``r`` while
    ``r < 0.5`` (where top-k sends fewer bytes than fp32), no compression otherwise.
    ``rule.ratio`` is the fraction itself; it returns to 1.0 when the network allows.
    """

    def __init__(
        self,
        *,
        mode: str = "ladder",
        bdp_gain: float = 0.9,
        decrease: float = 0.95,
        increase: float = 0.001,
        floor: float = 0.005,
        comm_bound_factor: float = 1.0,
        release_factor: float = 0.8,
        topk_start_ratio: float = 0.1,
        up_patience: int = 1,
        down_patience: int = 3,
        half_level: str = "fp16",
        jump: bool = True,
        max_cut: float = 0.25,
        compute_window: int = 20,
    ) -> None:
        if mode not in ("ladder", "bdp"):
            raise ValueError(f"policy mode must be 'ladder' or 'bdp', got {mode!r}")
        if not 0 < floor <= topk_start_ratio <= 1:
            raise ValueError("need 0 < floor <= topk_start_ratio <= 1")
        if not 0 < release_factor <= comm_bound_factor:
            raise ValueError("need 0 < release_factor <= comm_bound_factor (hysteresis)")
        if compute_window < 1:
            raise ValueError("need compute_window >= 1")
        if not 0 < max_cut <= decrease:
            raise ValueError("need 0 < max_cut <= decrease")
        if half_level not in ("fp16", "bf16"):
            raise ValueError(f"half_level must be 'fp16' or 'bf16', got {half_level!r}")
        self.mode = mode
        self.rule = BDPRule(bdp_gain, decrease, increase, floor, 1.0, 1.0)
        self.comm_bound_factor = comm_bound_factor
        self.release_factor = release_factor
        self.topk_start_ratio = topk_start_ratio
        self.up_patience = up_patience
        self.down_patience = down_patience
        self.jump = jump
        self.max_cut = max_cut
        self._computes: deque[float] = deque(maxlen=compute_window)
        self.ladder = ("none", half_level, "int8", "topk")
        self.level_index = 0
        self._up_count = 0
        self._down_count = 0
        self.steps = 0

    @property
    def decision(self) -> Decision:
        if self.mode == "bdp":
            # Top-k sends 8 bytes per kept element: at r >= 0.5 fp32 is cheaper.
            r = self.rule.ratio
            return Decision("topk", r) if bytes_ratio("topk", r) < 1.0 else Decision("none", 1.0)
        level = self.ladder[self.level_index]
        return Decision(level, self.rule.ratio if level == "topk" else 1.0)

    def observe(self, obs: Observation) -> Decision:
        """Feeds one step's observation; returns the decision for the next step."""
        self.steps += 1
        if self.mode == "bdp":
            if obs.bdp is not None:
                self.rule.update(obs.inflight_bytes, obs.bdp)
            return self.decision

        self._computes.append(obs.compute_s)
        compute = min(self._computes)
        budget = self.comm_bound_factor * compute
        comm_bound = obs.comm_s > budget
        congested = obs.bdp is None or self.rule.congested(obs.inflight_bytes, obs.bdp)
        level = self.ladder[self.level_index]

        if level == "topk":
            if comm_bound:
                # With jumps: in proportion to how far comm is above budget, within
                # [max_cut, decrease]; without: the paper's fixed x decrease.
                cut = min(self.rule.decrease, max(self.max_cut, budget / obs.comm_s))
                self.rule.shrink(cut if self.jump else None)
            elif not congested:
                self.rule.grow()
        else:
            self._up_count = self._up_count + 1 if comm_bound else 0
            if self._up_count >= self.up_patience:
                if self.jump:
                    self._jump_up(obs.comm_s, budget)
                else:
                    self._move(+1)
                return self.decision

        if self.level_index > 0:
            cur = bytes_ratio(level, self.rule.ratio)
            lower = self.ladder[self.level_index - 1]
            predicted = obs.comm_s * bytes_ratio(lower, self.topk_start_ratio) / max(cur, 1e-12)
            release = predicted < self.release_factor * compute
            self._down_count = self._down_count + 1 if release else 0
            if self._down_count >= self.down_patience:
                self._move(-1)
        return self.decision

    def _jump_up(self, comm_s: float, budget: float) -> None:
        """Moves to the least-compressing level whose predicted comm time fits ``budget``."""
        dense_comm = comm_s / bytes_ratio(self.ladder[self.level_index], 1.0)
        for i in range(self.level_index + 1, len(self.ladder) - 1):
            if dense_comm * bytes_ratio(self.ladder[i], 1.0) <= budget:
                self._move(i - self.level_index)
                return
        self._move(len(self.ladder) - 1 - self.level_index)
        fit = budget / (dense_comm * bytes_ratio("topk", 1.0))
        self.rule.ratio = min(self.topk_start_ratio, max(self.rule.floor, fit))

    def _move(self, direction: int) -> None:
        self.level_index = max(0, min(len(self.ladder) - 1, self.level_index + direction))
        self._up_count = 0
        self._down_count = 0
        if self.ladder[self.level_index] == "topk":
            self.rule.ratio = self.topk_start_ratio
