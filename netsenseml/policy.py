"""NetSenseML's adaptive policy: which gradient representation the next step sends.

The algorithm, once
-------------------
**Objective: time to accuracy** = (steps the job needs) x (seconds per step). Each step the
policy picks the representation ``d`` of the ladder (the method registry's ``ladder``
levels: ``none -> fp16 -> int8 -> topk(r)``, ``r`` on a geometric grid of
``ratios_per_decade`` points per decade from ``max_ratio`` down to ``floor``) that
minimises

    J(d) = c(d) x T(d)

``c(d) >= 1`` is the convergence prior of the job (``netsenseml.convergence``: a table that
``netsense convergence`` measured for this workload, or the stated conservative default) and
``T(d)`` the predicted seconds of one step that sends ``d`` (:class:`StepModel`).

**Step model** (:class:`StepModel`). ``T(d) = C + K(d) + E(d)``: compute ``C`` (the step
period less the exposed communication and the codec time, a low quantile over recent steps:
stalls outside the hook only ever add), codec ``K(d)`` (the registration calibration's timing of
each level, replaced by the level's own measured minimum once it has been used), and the
exposed communication ``E(d) = max(comm(d) / n, comm(d) - H)`` (``H``: the time from a
step's first to its last launch, where DDP's buckets overlap the backward pass). The
communication is modelled per *collective kind*, because the link treats them differently:

* the allreduce family (none, fp16/bf16) and the all-gather family (int8, top-k) each have
  their own fixed cost ``a_k`` (seconds per step that compression cannot remove: latency,
  standing queue and, for all-gathers, their extra rounds and framing) and slope ``b_k``
  (seconds per wire byte);
* where the current regime has measured a kind at two sizes at least ``min_spread`` apart
  whose comm times differ by more than the noise, ``a_k`` and ``b_k`` are that kind's least
  squares line through the sizes' medians -- so the marginal cost of the small all-gathers
  comes from small all-gathers (under drop-tail congestion it is several times the fair
  share a large transfer gets);
* otherwise ``b_k`` is the inverse of the **rate the monitor senses** (``netsenseml.monitor``:
  windowed delivery rate of transfers long enough to mean one, mean over ranks) and
  ``a_k`` what the kind's measured comm time leaves beyond ``b_k x bytes`` (at least 0,
  at most ``change_factor`` x the kind's last identified ``a_k``: one size cannot tell
  latency from bandwidth, and a sensed rate above the true share would otherwise turn the
  slowdown into a fixed cost that no compression removes; the rest goes to ``b_k``);
  a kind not measured in the regime keeps its last identified ``a_k`` (the registration
  calibration's latency at first);
* a size the regime *has* measured is predicted by its own median, not the line: a
  transfer below the shaper's burst leaves at line speed, and no line through fixed cost
  and rate describes it; the line is only used to extrapolate to sizes not seen.

**Drift.** Candidates of the other collective kind are priced from samples taken at other
times (a one-step probe, a level left a few steps ago), while a queue's backlog drifts under
TCP cross traffic without a change the detector confirms. Such a sample is brought to now by
how much slower the size sent throughout has become since (its median now / its median
around the sample; applied where the two differ by more than ``confidence`` standard errors,
clipped to ``change_factor``) -- a queue delays every size alike (:meth:`StepModel.drift`).

**Period bound.** Whatever the comm prediction, ``T(d) >= x(d) / R``: a step that puts
``x`` wire bytes through a path of rate ``R`` takes at least that on average. A shaper's
bucket lets a short transfer out at line speed only as long as its tokens last, and they
refill at ``R``; so all-gathers measured inside the burst
fit a line many times faster than the link, and extrapolated along it a larger one (int8
above the top-k sizes) looks nearly free until it is sent. The bound prices such a level
by the link instead. ``R`` is the fastest rate the path has been seen at, not the one
sensed last: that may be a congested phase's after it ended (a change the detector missed),
and a lower bound must never overprice.

So there is one rate: the monitor's, logged as ``model_rate_mbit`` beside its source.

**Uncertainty.** Every prediction carries a standard error: a measured size's from the
spread of its samples (1.25 x 1.4826 x MAD / sqrt(n), the standard error of a median), an
extrapolated one from the kind's relative spread (at least ``min_rel_error``). A move from
the current decision ``cur`` to a candidate ``d`` needs ``J(cur) - J(d) > U`` with
``U = confidence x sqrt(se_J(cur)^2 + se_J(d)^2) + min_gain x J`` (what the codec and
compute estimates, outside the comm errors, may be off by), plus the prior's own
``resolution`` x J where the two differ in ``c`` (one evaluation interval of the table). In a
young regime (below, "Decisions") the standard-error term is left out: the detector has
confirmed the change, and the few samples since make every error bar wide. Within the band the
policy stays -- except that it moves to a *less* compressed candidate whose ``J`` is not
larger than the current one: of equal costs the more faithful wins, which within top-k
means the least compressed ratio within tolerance, not the bare argmin of a flat ``J(r)``
(which would drift to the floor). Such a tie moves across levels (top-k -> int8) only if
the regime's last move was not toward more compression: a tie does not undo a
significant gain.

**Regime changes** (:class:`RegimeDetector`). ``change_confirm`` consecutive steps of the
same size whose comm time is ``change_factor`` above or below the prediction (at once when
one is slower by more than ``spike_s``: a congested long transfer, not a spike) start a new
regime (the steps of a streak are judged against the prediction made before it began, so
that a gradual onset -- cross traffic ramping up over a few steps -- is not hidden by a
prediction that rises with it): the fits restart from those steps, the monitor's rate window restarts (the hook
does it on every rank at the same step), and the back-off resets. Nothing else resets it:
a bandwidth estimate that moves with noise does not.

**Decisions** (:class:`Hysteresis`). A move must be called for ``decide_confirm``
observations in a row -- except in a *young regime*: from a new regime at least
``2 x change_factor`` slower than predicted (the detector's median ratio) up to its first
observation with a freshly sensed rate (at most ``change_confirm + decide_confirm``
observations), a move is taken at once and judged without the error bars (the run that
showed why: ``results/policy/README.md``, "Young regime").
A move against the direction of the regime's previous move is an oscillation -- across
labels (fp16 -> top-k -> fp16) or along top-k's ratio grid (0.008 -> 0.08 -> 0.019 ->
0.008: a flat ``J(r)`` whose noise decides): it multiplies the confirmation count by
``backoff_factor`` (up to ``max_confirm``), like TCP's retransmission back-off (the band
``U`` already holds the noise; grown too, it would freeze a wrong level). Moves taken at
once (a young regime, the first steps) correct a guess and start the direction afresh.

**Probes** (:class:`Prober`). The all-gather family's slope needs two sizes, and after the
path got faster the rate sensed at a compressed level is stale. So (like BBR's probing)
when the fit has seen one size of its kind for ``probe_every`` steps, one step goes at
``min_spread`` times the bytes (the largest candidate within ``probe_budget`` x a step of
predicted extra cost); and after a regime change to a faster path while compressing, one
step goes at the least compressed level the link would call for if it were as fast as the
fastest rate seen (``Decision.probe``; the decision itself does not change).
Both are priced by the model, and the model prices a dense level at the rate last sensed --
which, while the policy sends only all-gathers (no rate samples: they are too short), is
the rate of whenever it last sent a dense step. If the path got faster without a regime
change the detector could confirm (noisy small transfers, a ratio that moved meanwhile),
that stale rate prices the dense level so high that no budgeted probe ever goes, and the
policy stays compressed on a fast link. So a **stale-rate probe** is not priced by the
model: after ``probe_every`` observations in a row at all-gather levels, one step goes at
the least compressed level the fastest rate seen would call for (when that is a dense
level); the next waits in proportion to what this one cost (:meth:`Prober.probed`: a probe
that took twice the current step waits ``probe_every`` observations, one that took 5x waits
4 x as long), so on a link that stays slow they cost about ``1 / probe_every`` of the time,
and after the path got faster the policy learns it within a gap. The dense step after which
the policy moved to an all-gather level measured what such a probe would, in the same
regime, so it prices the first gap (:meth:`Prober.compressed`) instead of a probe
``probe_every`` steps into a congested phase measuring it again. A gap priced against a
step that has since become ``reprice_factor`` faster (the model's prediction for the
decision it was priced against, which follows the measured steps; not the current
decision's, which a ratio move changes) is ``probe_every`` again: where ranks
share cores a congested phase's end can shorten top-k's step by less than the detector's
factor, or too noisily for it to confirm, and a gap priced by the congestion's dense probes
would outlast the next idle phase.

**Timing.** Ranks take identical decisions: the policy sees the mean over ranks of each
step's measurements, piggy-backed on the next step's bucket-0 collective; its decision
applies from the step after (``netsenseml.hooks``). The first decision comes from the
registration calibration with ``initial_compute_s`` as the compute time.

Settings: one frozen, validated :class:`PolicyConfig` (a bad value is a one-line
ValueError naming the field and what it accepts); the parts are usable and testable alone.
Pure Python (no torch) and deterministic.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from netsenseml import convergence, methods

#: The policy's levels, least reduction first: the registry's ladder (``bf16`` stands in
#: for ``fp16`` through ``half_level``).
LADDER: tuple[str, ...] = tuple(i.label for i in methods.ladder() if i.label != "bf16")
#: Levels exchanged by all-gather (per-rank payloads), from the registry.
GATHERED: tuple[str, ...] = tuple(i.label for i in methods.ladder() if i.reduction == "allgather")
RATIO_LEVELS: tuple[str, ...] = tuple(i.label for i in methods.ladder() if i.arg == "ratio")


def kind_of(level: str) -> str:
    """``"allgather"`` or ``"allreduce"``: how the level's payload travels."""
    return "allgather" if level in GATHERED else "allreduce"


@dataclass(frozen=True)
class Decision:
    """What a step sends: ``level`` and, for top-k, the kept fraction ``ratio``."""

    level: str
    ratio: float = 1.0  # kept fraction for top-k; 1.0 for dense levels
    probe: bool = False  # a one-step measurement (see Prober)

    def for_bucket(self, index: int) -> Decision:
        """What DDP bucket ``index`` sends: the step's decision. A policy that decides per
        bucket (``netsenseml.accordion``) returns a subclass that overrides this."""
        del index
        return self


@dataclass(frozen=True)
class Calibration:
    """Facts of the job and of the registration calibration (identical on every rank).

    ``dense_bytes``: fp32 bytes of the gradient (all buckets); ``latency_s``: seconds of a
    one-element allreduce; ``s_per_byte``: seconds per byte of a fp32 allreduce beyond its
    latency; ``codec_s``: seconds per step to compress and decode each level (keys: level
    names); ``topk_bytes_per_element``: value + index bytes of one kept element;
    ``gather_latency_s``: a one-element all-gather (None: as ``latency_s``).
    """

    dense_bytes: float
    world_size: int
    latency_s: float
    s_per_byte: float
    codec_s: Mapping[str, float] = field(default_factory=dict)
    topk_bytes_per_element: float = 8.0
    gather_latency_s: float | None = None


@dataclass(frozen=True)
class Observation:
    """One completed step, averaged over ranks.

    ``decision``: what the step sent; ``comm_s``: seconds at least one collective was in
    flight; ``exposed_s``: seconds the step waited for communication after its last launch;
    ``compute_s``: period minus ``exposed_s`` (codec included); ``codec_s``; ``bytes_sent``;
    ``collectives``; ``overlap_s``: first to last launch; ``rate_Bps``: the monitor's
    delivery rate (fp32-allreduce-equivalent payload bytes per second; 0: none sensed since
    its window restarted); ``min_rtt_s``: the monitor's min RTT (0: none); ``queue_s``: its
queueing delay (what tiny collectives take beyond the min RTT);
    ``congested`` / ``samples``: the prototype rule's verdict counts (unused here);
    ``grad_norms``: per bucket, a window's accumulated gradient norm (``netsenseml.loop``,
    for a policy with ``grad_norm_every``; unused here).
    """

    decision: Decision
    comm_s: float
    exposed_s: float
    compute_s: float
    codec_s: float
    bytes_sent: float
    collectives: float = 1.0
    overlap_s: float = 0.0
    rate_Bps: float = 0.0
    min_rtt_s: float = 0.0
    queue_s: float = 0.0
    congested: float = 0.0
    samples: float = 0.0
    # per DDP bucket, the norm of the local gradient accumulated over the policy's window
    # (mean over ranks), on the step that closed a window; () otherwise (``grad_norm_every``)
    grad_norms: tuple[float, ...] = ()


def bytes_ratio(level: str, ratio: float = 1.0, bytes_per_element: float = 8.0) -> float:
    """Bytes handed to torch.distributed relative to the fp32 gradient.

    Dense levels: the registry's ``wire``; top-k: value + index bytes of the job's index
    dtype (``bytes_per_element``) per kept element.
    """
    if level in RATIO_LEVELS:
        return ratio * bytes_per_element / 4.0
    return methods.bytes_ratio(level)


# ----------------------------------------------------------------------------- settings
def _bad(name: str, accepted: str, got: Any) -> ValueError:
    return ValueError(f"policy setting {name}: must be {accepted}, got {got!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """Every setting of :class:`NetSensePolicy` (module docstring), validated once.

    A bad value raises a one-line ValueError naming the field and the accepted values.
    ``dataclasses.replace(config, field=value)`` gives a modified, re-validated copy.
    """

    levels: tuple[str, ...] = LADDER  # the allowed ladder levels
    half_level: str = "fp16"  # fp16 or bf16 for the half-precision level
    floor: float = 0.005  # smallest top-k ratio
    max_ratio: float = 0.25  # largest top-k ratio
    ratios_per_decade: int = 8  # grid density of top-k ratios
    confidence: float = 2.0  # standard errors a J difference must exceed to move
    min_rel_error: float = 0.03  # least relative standard error of an extrapolated comm time
    min_gain: float = 0.03  # J differences below this fraction never move the decision
    decide_confirm: int = 3  # observations in a row that must call for a move
    max_confirm: int = 48  # the back-off's cap on decide_confirm
    backoff_factor: float = 4.0  # growth of confirmation and band per reversal
    change_factor: float = 2.0  # comm time off the prediction by this factor ...
    change_confirm: int = 3  # ... for this many steps: a new regime
    spike_s: float = 0.25  # a step this much slower is a new regime at once
    fit_window: int = 20  # points per collective kind in the current regime
    min_spread: float = 3.0  # sizes this far apart tell fixed cost from slope
    size_memory: int = 5  # latest samples per size in a fit
    noise_mads: float = 4.0  # sizes closer than this many MADs tell nothing apart
    compute_window: int = 20  # latest compute times the compute estimate is taken over
    compute_quantile: float = 0.1  # ... and its quantile (stalls outside the hook only add)
    codec_window: int = 5  # latest codec times per level (their minimum is the estimate)
    overlap_window: int = 5  # latest first-to-last launch times (their minimum hides comm)
    probe_every: int = 20  # steps at one size of a kind before a probe
    probe_budget: float = 0.5  # a probe's predicted extra cost, in steps
    reprice_factor: float = 1.5  # the decision's step this much faster: the stale gap is priced anew
    initial_compute_s: float = 0.0  # compute assumed before the first measured step

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        object.__setattr__(self, "levels", levels)
        if not levels or any(lvl not in LADDER for lvl in levels) or len(set(levels)) != len(levels):
            raise _bad("levels", f"a non-empty subset of {LADDER}", self.levels)
        if self.half_level not in ("fp16", "bf16"):
            raise _bad("half_level", "'fp16' or 'bf16'", self.half_level)
        if not 0 < self.floor <= 1:
            raise _bad("floor", "in (0, 1]", self.floor)
        if not self.floor <= self.max_ratio <= 1:
            raise _bad("max_ratio", f"in [floor={self.floor}, 1]", self.max_ratio)
        ints = {"ratios_per_decade": 1, "decide_confirm": 1, "change_confirm": 1, "fit_window": 2,
                "size_memory": 1, "compute_window": 1, "codec_window": 1, "overlap_window": 1,
                "probe_every": 1}
        for name, low in ints.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise _bad(name, f"an integer >= {low}", v)
        if not isinstance(self.max_confirm, int) or self.max_confirm < self.decide_confirm:
            raise _bad("max_confirm", f"an integer >= decide_confirm={self.decide_confirm}", self.max_confirm)
        if self.change_confirm > self.fit_window:
            raise _bad("change_confirm", f"<= fit_window={self.fit_window}", self.change_confirm)
        positive = {"confidence": (0, False), "min_rel_error": (0, True), "backoff_factor": (1, True), "min_gain": (0, True),
                    "change_factor": (1, False), "min_spread": (1, False), "noise_mads": (0, False),
                    "spike_s": (0, True), "probe_budget": (0, True), "initial_compute_s": (0, True),
                    "reprice_factor": (1, False)}
        for name, (low, inclusive) in positive.items():
            v = getattr(self, name)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and (
                v >= low if inclusive else v > low)
            if not ok:
                raise _bad(name, f"a finite number {'>=' if inclusive else '>'} {low}", v)
        if not 0 <= self.compute_quantile < 0.5:
            raise _bad("compute_quantile", "in [0, 0.5)", self.compute_quantile)

    def ratios(self) -> tuple[float, ...]:
        """The top-k grid, largest first, ending at ``floor``."""
        out, i = [], 0
        while (r := self.max_ratio * 10 ** (-i / self.ratios_per_decade)) > self.floor * (1 + 1e-9):
            out.append(r)
            i += 1
        return (*out, self.floor)

    def candidates(self) -> list[Decision]:
        """The ladder (the allowed ``levels``), least compressed first."""
        lv = [self.half_level if x == "fp16" else x for x in self.levels]
        dense = [Decision(x) for x in lv if x not in RATIO_LEVELS]
        sparse = [Decision(x, r) for x in lv if x in RATIO_LEVELS for r in self.ratios()]
        return dense + sparse


FIELDS = tuple(f.name for f in dataclasses.fields(PolicyConfig))

#: Steps either side of a sample within which the size sent now tells the path's state
#: then (:meth:`StepModel.drift`).
DRIFT_STEPS = 2


# ----------------------------------------------------------------------------- helpers
def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def _mad(values: list[float]) -> float:
    m = _median(values)
    return _median([abs(x - m) for x in values])


def _se_median(values: list[float]) -> float:
    """Standard error of the median of ``values`` (normal approximation, robust spread)."""
    if len(values) < 2:
        return math.inf
    return 1.25 * 1.4826 * _mad(values) / math.sqrt(len(values))


# ----------------------------------------------------------------------------- parts
class StepModel:
    """``T(d)`` and its standard error from a job's measured steps (module docstring)."""

    def __init__(self, config: PolicyConfig, cal: Calibration) -> None:
        if cal.dense_bytes <= 0 or cal.world_size < 1:
            raise ValueError("calibration needs dense_bytes > 0 and world_size >= 1")
        self.config, self.cal = config, cal
        self.collectives = 1.0
        self._points: dict[str, deque[tuple[float, float, int]]] = {
            k: deque(maxlen=config.fit_window) for k in ("allreduce", "allgather")}
        self._fixed = {"allreduce": max(0.0, cal.latency_s),
                       "allgather": max(0.0, cal.gather_latency_s if cal.gather_latency_s is not None
                                        else cal.latency_s)}
        self._fixed_per_collective = True  # until a step measured it
        # whether two sizes identified the kind's fixed cost (``_identified``); until then
        # ``_fixed`` holds the registration calibration's latency of one collective
        self._fixed_fitted = {"allreduce": False, "allgather": False}
        self.queue = 0.0  # the monitor's queueing delay now (mean over ranks)
        self._queue_at = {"allreduce": 0.0, "allgather": 0.0}  # ... when _fixed was identified
        self.rate = 1.0 / cal.s_per_byte if cal.s_per_byte > 0 else math.inf  # B/s, wire bytes
        self.rate_fresh = False  # sensed by the monitor since the regime began
        self.top_rate = self.rate  # the fastest rate seen in the run
        self._compute: deque[float] = deque(maxlen=config.compute_window)
        self._hidden: deque[float] = deque(maxlen=config.overlap_window)
        self._codec: dict[str, deque[float]] = {}
        self.steps = 0
        self.points_version = 0  # bumped whenever ``_points`` changes (drift's cache key)
        # drift's result and the (steps, points_version) it was computed at
        self._drift: tuple[tuple[int, int], str | None, dict[int, float]] | None = None

    # -- inputs
    def wire_bytes(self, d: Decision) -> float:
        """fp32-allreduce-equivalent bytes ``d`` puts on the wire per step (a W-rank
        all-gather moves W/2 times what a ring allreduce of the same bytes moves)."""
        b = self.cal.dense_bytes * bytes_ratio(d.level, d.ratio, self.cal.topk_bytes_per_element)
        return b * max(1.0, self.cal.world_size / 2) if d.level in GATHERED else b

    def add(self, obs: Observation) -> None:
        self.steps += 1
        self.collectives = max(1.0, float(round(obs.collectives)))
        self._fixed_per_collective = False
        self._compute.append(max(obs.compute_s - obs.codec_s, 0.0))
        self._hidden.append(max(obs.overlap_s, 0.0))
        self._codec.setdefault(obs.decision.level, deque(maxlen=self.config.codec_window)).append(
            max(obs.codec_s, 0.0))
        self.queue = max(0.0, obs.queue_s)
        if obs.rate_Bps > 0:
            self.rate, self.rate_fresh = obs.rate_Bps, True
            self.top_rate = max(self.top_rate, obs.rate_Bps) if math.isfinite(self.top_rate) else obs.rate_Bps

    def restart_rate(self) -> None:
        """The monitor's window restarted (a new regime): its rate is stale until sensed."""
        self.rate_fresh = False

    @contextmanager
    def assuming_rate(self, rate: float) -> Iterator[StepModel]:
        """A what-if: inside the block the model predicts as if ``rate`` had just been
        sensed and the regime had measured nothing yet (the probes' question: what would
        the link call for at the fastest rate seen); everything is as it was after it."""
        saved = (self.rate, self.rate_fresh,
                 {k: deque(v, maxlen=v.maxlen) for k, v in self._points.items()},
                 dict(self._fixed), dict(self._queue_at))
        self.rate, self.rate_fresh = rate, True
        for pts in self._points.values():
            pts.clear()
        self.points_version += 1
        try:
            yield self
        finally:
            self.rate, self.rate_fresh = saved[0], saved[1]
            self._points.update(saved[2])
            self.points_version += 1
            self._fixed.update(saved[3])
            self._queue_at.update(saved[4])

    def add_point(self, d: Decision, comm_s: float) -> None:
        self._points[kind_of(d.level)].append((self.wire_bytes(d), max(comm_s, 0.0), self.steps))
        self.points_version += 1

    def _identified(self, kind: str, a: float) -> None:
        self._fixed[kind] = a
        self._fixed_fitted[kind] = True
        self._queue_at[kind] = self.queue

    def new_regime(self, keep: int) -> None:
        """Restarts the fits from the points of the latest ``keep`` steps. A kind without
        any there is predicted from its last identified fixed cost, plus the queueing
        delay the monitor's tiny collectives show beyond what they showed then, plus its
        bytes at the rate sensed now: a standing queue delays every collective by about
        the same, a narrower share slows long transfers."""
        for pts in self._points.values():
            recent = [p for p in pts if p[2] > self.steps - keep]
            pts.clear()
            pts.extend(recent)
        self.points_version += 1
        self.rate_fresh = False

    # -- the model
    def _live(self, kind: str) -> list[tuple[float, float, int]]:
        """The kind's points of the regime from the last ``fit_window`` steps: older ones
        may predate a change of the path too small to start a new regime."""
        return [p for p in self._points[kind] if p[2] > self.steps - self.config.fit_window]

    def largest(self) -> float:
        """The largest wire size the current regime measured (any kind; 0: none)."""
        return max((p[0] for k in self._points for p in self._live(k)), default=0.0)

    def measured(self, kind: str) -> bool:
        """Whether the current regime has measured ``kind`` recently."""
        return bool(self._live(kind))

    def groups(self, kind: str) -> dict[float, list[float]]:
        """Latest ``size_memory`` comm times per size of ``kind`` in the regime, each
        brought to the path's state now (:meth:`drift`)."""
        out: dict[float, list[float]] = {}
        ref_kind, drift = self.drift()
        if kind == ref_kind:
            drift = {}
        for x, y, t in sorted(self._live(kind), key=lambda p: -p[2]):
            if len(out.setdefault(x, [])) < self.config.size_memory:
                out[x].append(y * drift.get(t, 1.0))
        return out

    def drift(self) -> tuple[str | None, dict[int, float]]:
        """The collective kind the policy sends now, and per step of the regime's samples
        how much slower the path is now than then, as the size it sends now measured it
        (its median now / its median within ``DRIFT_STEPS`` of that step; clipped to
        ``change_factor`` either way: a larger change is the detector's); none where that
        size has no samples near the step or the change is within their noise.
        :meth:`groups` applies it to the *other* kind's samples only: within a kind the
        sizes were sent by turns and their line (fixed cost and slope) is fitted as
        measured.

        Why: under TCP cross traffic a drop-tail queue's backlog drifts over seconds
        without a change the detector confirms. Candidates are priced from samples taken
        at other times: a one-step probe of another level, a ratio left a few steps ago.
        Read raw, such a sample from a quiet moment prices its level as if the moment
        lasted (the runs that showed it: ``results/policy/README.md``, "Drift"). The
        queue delays every size alike, so the size measured throughout tells each
        sample's moment from now."""
        key = (self.steps, self.points_version)
        if self._drift is not None and self._drift[0] == key:
            return self._drift[1], self._drift[2]
        pts = [(k, p) for k in self._points for p in self._live(k)]
        sizes: dict[tuple[str, float], list[tuple[int, float]]] = {}
        for k, (x, y, t) in pts:
            sizes.setdefault((k, x), []).append((t, y))
        # the reference: the newest sample's size among those measured at least twice (a
        # one-step probe is not what the policy sends)
        newest_first = sorted(pts, key=lambda q: -q[1][2])
        ref = next(((k, x) for k, (x, _, _) in newest_first if len(sizes[(k, x)]) >= 2), None)
        out: dict[int, float] = {}
        if ref is not None:
            c = self.config
            own = sorted(sizes[ref], reverse=True)
            recent = [y for _, y in own[: c.size_memory]]
            now, se_now = _median(recent), _se_median(recent)
            # only the other kind's samples are corrected (groups), so only their steps
            for k, (_, _, t) in pts:
                if k == ref[0] or t in out or now <= 0:
                    continue
                near = [y for u, y in own if abs(u - t) <= DRIFT_STEPS]
                if not near:
                    continue
                then = _median(near)
                # a drift beyond ``confidence`` standard errors of the two medians (as a
                # move is judged) and the model's least relative error; else as measured
                noise = c.confidence * math.hypot(se_now, _se_median(near))
                if then > 0 and abs(now - then) > max(noise, c.min_rel_error * then):
                    out[t] = min(c.change_factor, max(1.0 / c.change_factor, now / then))
        kind = ref[0] if ref is not None else None
        self._drift = (key, kind, out)
        return kind, out

    def slope(self) -> float:
        """Seconds per wire byte of a long transfer now: the monitor's rate where it sensed
        one in this regime, else what the regime's dense steps imply beyond their fixed
        cost, else the last sensed rate."""
        if not self.rate_fresh:
            g = self.groups("allreduce")
            if g:
                x = max(g)
                return max(0.0, (_median(g[x]) - self._fixed["allreduce"]) / x)
        return 1.0 / self.rate if self.rate > 0 and math.isfinite(self.rate) else 0.0

    def spread(self) -> float:
        """Relative spread (1.4826 x MAD / median) of the regime's comm times, all sizes
        of both kinds: what an extrapolation is at least as uncertain as."""
        devs = []
        for kind in self._points:
            for ys in self.groups(kind).values():
                if len(ys) >= 2:
                    m = _median(ys)
                    devs.extend(abs(y - m) / m for y in ys if m > 0)
        return max(self.config.min_rel_error, 1.4826 * _median(devs) if devs else 0.0)

    def fit(self, kind: str) -> tuple[float, float, float, bool]:
        """``(a_k, b_k s/byte, relative spread, from two sizes)`` of ``kind`` now."""
        g = self.groups(kind)
        rel = self.spread()
        if not g:
            a = self._fixed[kind] * (self.collectives if self._fixed_per_collective else 1.0)
            a += max(0.0, self.queue - self._queue_at[kind])
            return a, self.slope(), rel, False
        xs = sorted(g)
        med = {x: _median(g[x]) for x in xs}
        noise = _median([abs(y - med[x]) for x in xs for y in g[x]])
        if len(xs) >= 2 and xs[0] > 0 and xs[-1] >= self.config.min_spread * xs[0] and (
                med[xs[-1]] - med[xs[0]] > self.config.noise_mads * noise):
            w = {x: len(g[x]) for x in xs}
            n = sum(w.values())
            mx = sum(w[x] * x for x in xs) / n
            my = sum(w[x] * med[x] for x in xs) / n
            sxx = sum(w[x] * (x - mx) ** 2 for x in xs)
            slope = max(0.0, sum(w[x] * (x - mx) * (med[x] - my) for x in xs) / sxx)
            a = max(0.0, my - slope * mx)
            self._identified(kind, a)
            return a, slope, rel, True
        x = xs[-1]
        if self.rate_fresh:
            # One size and a sensed rate: the fixed cost is what the time leaves beyond it
            # -- but never more than ``change_factor`` x the kind's last identified fixed cost
            # (a drift the regime detector would not call a change). One size cannot
            # tell latency from bandwidth; where the sensed rate is too high (under drop-tail
            # congestion the monitor's samples reach several times the fair share), the
            # remainder read as fixed cost would price every compressed level as slow as
            # the current one and freeze it (results/policy/README.md, "Fixed cost
            # bound"). Less bandwidth is the
            # safe side; a second size (the probes) identifies a grown fixed cost, and only
            # that (or the registration calibration) sets the bound: a bound this branch lowered
            # would ratchet down on every quiet sample.
            b = 1.0 / self.rate if self.rate > 0 and math.isfinite(self.rate) else 0.0
            ref = self._fixed[kind] * (1.0 if self._fixed_fitted[kind] else self.collectives)
            a = min(max(0.0, med[x] - b * x), self.config.change_factor * ref)
            return a, max(b, (med[x] - a) / x), rel, False
        # One size, no rate sensed in this regime: the last identified fixed cost stands
        # and the slope takes the rest (a standing queue first reads as less bandwidth,
        # the safe side, until a second size or a rate sample separates the two).
        a = min(self._fixed[kind], med[x])
        return a, max(0.0, (med[x] - a) / x), rel, False

    def comm(self, d: Decision) -> tuple[float, float]:
        """Predicted comm seconds of a step that sends ``d`` and its standard error."""
        kind = kind_of(d.level)
        x = self.wire_bytes(d)
        g = self.groups(kind)
        near = [s for s in g if s > 0 and max(s, x) / min(s, x) < 1.05]
        if near and len(g[near[0]]) >= 2:
            # its own median; the error from the regime's pooled spread (a spread of two
            # or three samples of one size says little)
            ys = g[near[0]]
            med = _median(ys)
            return med, 1.25 * self.spread() * med / math.sqrt(len(ys))
        a, b, rel, _ = self.fit(kind)
        value = a + b * x
        return value, rel * value

    def compute_s(self) -> float:
        if not self._compute:
            return self.config.initial_compute_s
        v = sorted(self._compute)
        return v[round(self.config.compute_quantile * (len(v) - 1))]

    def codec_s(self, level: str) -> float:
        seen = self._codec.get(level)
        if seen:
            return min(seen)
        return float(self.cal.codec_s.get(level, 0.0))

    def period_bound(self, d: Decision) -> float:
        """Seconds a step that sends ``d`` takes at least, on average: its wire bytes / the
        fastest rate the path has been seen at (module docstring, "period bound"; 0: no
        rate)."""
        rate = max(self.rate, self.top_rate)
        if not (rate > 0 and math.isfinite(rate)):
            return 0.0
        return self.wire_bytes(d) / rate

    def step_s(self, d: Decision) -> tuple[float, float]:
        """Predicted seconds of one step that sends ``d``, and its standard error."""
        hidden = min(self._hidden) if self._hidden else 0.0
        comm, se = self.comm(d)
        exposed = max(comm / self.collectives, comm - hidden)
        frac = exposed / comm if comm > 0 else 1.0
        step = self.compute_s() + self.codec_s(d.level) + exposed
        bound = self.period_bound(d)
        if bound > step:
            return bound, self.spread() * bound
        return step, se * frac

    def stats(self) -> dict[str, float]:
        a_ar, _, _, _ = self.fit("allreduce")
        a_ag, b_ag, _, two = self.fit("allgather")
        return {"model_fixed_allreduce_s": a_ar, "model_fixed_allgather_s": a_ag,
                "model_rate_mbit": 8e-6 * self.rate if math.isfinite(self.rate) else float("inf"),
                "model_rate_fresh": float(self.rate_fresh),
                "model_allgather_mbit": (8e-6 / b_ag if b_ag > 0 else float("inf")),
                "model_allgather_fitted": float(two),
                "model_compute_s": self.compute_s()}


class RegimeDetector:
    """Tells a new regime from noise: ``change_confirm`` same-size steps ``change_factor``
    off the prediction, or one slower by more than ``spike_s`` (module docstring)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._off = 0
        self._last_x = 0.0
        self._ratios: list[float] = []  # measured / predicted of the steps off
        self._ref = 0.0  # the prediction the current streak of steps off started from
        self.direction = 0  # +1: slower, -1: faster (of the last new regime)
        self.factor = 1.0  # measured / predicted comm time at the last new regime

    def check(self, x: float, y: float, predicted: float) -> int:
        """0, or the number of latest steps that make a new regime (signed: slower > 0)."""
        c = self.config
        same = self._last_x > 0 and max(x, self._last_x) < c.min_spread * min(x, self._last_x)
        self._last_x = x
        # Within a streak the steps are judged against the prediction made before it began:
        # a prediction from the kind's own recent median takes the streak's samples in, and
        # a gradual onset (TCP cross traffic ramps up over a few steps) would otherwise keep
        # every step under change_factor x a prediction that rises with it.
        if self._off > 0 and same:
            predicted = min(predicted, self._ref)
        elif self._off < 0 and same:
            predicted = max(predicted, self._ref)
        if same and y > c.change_factor * predicted:
            if self._off <= 0:
                self._ratios, self._ref = [], predicted
            self._off = max(self._off, 0) + 1
        elif same and y * c.change_factor < predicted:
            if self._off >= 0:
                self._ratios, self._ref = [], predicted
            self._off = min(self._off, 0) - 1
        else:
            self._off, self._ratios = 0, []
        if self._off:
            self._ratios.append(y / predicted if predicted > 0 else c.change_factor)
        at_once = self._off > 0 and y - predicted > c.spike_s
        if abs(self._off) >= c.change_confirm or at_once:
            n, self._off = self._off, 0
            self.direction = 1 if n > 0 else -1
            self.factor = _median(self._ratios)
            self._ratios = []
            return n
        return 0


class Hysteresis:
    """Confirmation and back-off of moves (module docstring, "Decisions")."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.confirm = config.decide_confirm
        self.band = 1.0
        self._dir: bool | None = None  # the direction being confirmed (True: release)
        self._count = 0
        self._last_move: bool | None = None  # the direction of the regime's last confirmed move
        self.reversals = 0  # confirmed moves against the previous one's direction, all regimes

    def reset(self) -> None:
        self.confirm, self.band, self._last_move = self.config.decide_confirm, 1.0, None

    @property
    def last_move(self) -> bool | None:
        """The direction of the regime's last confirmed move (True: release; None: none)."""
        return self._last_move

    def allow(self, cur: Decision, target: Decision, release: bool, at_once: bool) -> bool:
        """Counts a call for ``cur -> target`` (``release``: toward less compression);
        True when the move should happen now."""
        if target == cur:
            self._dir, self._count = None, 0
            return False
        self._count = self._count + 1 if self._dir == release else 1
        self._dir = release
        if not at_once and self._count < self.confirm:
            return False
        self._dir, self._count = None, 0
        if at_once:
            # a move the evidence of a new regime (or the first steps) takes at once starts
            # the direction memory afresh: it corrects a guess, it is not a noise-driven move
            self._last_move = None
            return True
        if self._last_move is not None and self._last_move != release:
            # Against the previous move within the regime: an oscillation, whether it
            # crosses a label (fp16 <-> top-k) or walks top-k's ratio grid back and forth
            # (a flat J(r) whose noise decides). The band U already holds the noise; what
            # grows is the persistence asked of the next move (a band grown too would
            # freeze a wrong level).
            self.confirm = min(round(self.config.backoff_factor * self.confirm), self.config.max_confirm)
            self.reversals += 1
        self._last_move = release
        return True


class ProbeQuestions(Protocol):
    """What the :class:`Prober` asks the policy, and nothing more: the decision in use, the
    candidates and their order, whether a move is allowed on the model's word, the best
    candidate were the rate another (a what-if of the step model), and the step model's
    predictions."""

    decision: Decision

    @property
    def model(self) -> StepModel: ...

    def candidates(self) -> list[Decision]: ...

    def fidelity(self, d: Decision) -> tuple[int, float]: ...

    def eligible(self, cur: Decision, d: Decision) -> bool: ...

    def best_at_rate(self, rate: float) -> Decision: ...


class Prober:
    """One-step probes where the model lacks a measurement (module docstring, "Probes")."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.unprobed = 0
        self.since_up = 0  # steps since the last probe toward less compression
        self.count = 0
        self.after_faster = False  # a probe is due: the path got faster while compressing
        self.since_rate = 0  # observations at an all-gather level: none sampled the rate
        self.stale_gap = config.probe_every  # ... before a stale-rate probe (see probed)
        self.stale_probe: Decision | None = None  # the stale-rate probe in flight
        self.priced: Decision | None = None  # the decision stale_gap was priced against
        self.priced_step = 0.0  # ... and its predicted step then
        self.dense_s = 0.0  # a dense step measured just before compressing (see compressed)

    def _up(self, policy: ProbeQuestions) -> Decision | None:
        """The least compressed level the link would call for at the fastest rate seen,
        where the regime has not measured it and it is less compressed than now."""
        m, cur = policy.model, policy.decision
        target = policy.best_at_rate(m.top_rate)
        if policy.fidelity(target) >= policy.fidelity(cur):
            return None
        if policy.eligible(cur, target):
            return None  # measured: the decision itself can move there
        return target

    def _stale(self, policy: ProbeQuestions) -> Decision | None:
        """A dense probe when the sensed rate is stale (module docstring, "Probes")."""
        cur = policy.decision
        if kind_of(cur.level) == "allreduce":  # every step samples the rate
            self.since_rate = 0
            return None
        self.since_rate += 1
        if (self.stale_gap > self.config.probe_every and self.priced is not None
                and policy.model.step_s(self.priced)[0] * self.config.reprice_factor < self.priced_step):
            # The gap was priced against a slower step: the path got faster (a congested
            # phase ended, below what the detector confirms), and the probe's cost with it.
            # That is what the probe is for, so it goes now.
            self.new_regime()
            self.since_rate = max(self.since_rate, self.stale_gap)
        if self.since_rate < self.stale_gap:
            return None
        target = policy.best_at_rate(policy.model.top_rate)
        if kind_of(target.level) != "allreduce":
            return None  # even at the fastest rate seen it would compress: nothing to learn
        self.since_rate = self.since_up = self.unprobed = 0
        self.count += 1
        self.stale_probe = dataclasses.replace(target, probe=True)
        return self.stale_probe

    def probed(self, policy: ProbeQuestions, obs: Observation) -> None:
        """Prices the next stale-rate probe by what this one cost: a probe that took ``x``
        times the current decision's step waits ``probe_every x (x - 1)`` observations
        (at least ``probe_every``), so on a link that stays slow such probes cost about
        ``1 / probe_every`` of the time."""
        if obs.decision != self.stale_probe:
            return
        self.stale_probe = None
        self._price(policy, obs.compute_s + obs.exposed_s)

    def _price(self, policy: ProbeQuestions, dense_s: float) -> None:
        """The gap after a dense step of ``dense_s`` seconds (:meth:`probed`), priced
        against the current decision. Its reprice compares that same decision's predicted
        step later: a move to another ratio changes the prediction, not the path."""
        step = policy.model.step_s(policy.decision)[0]
        x = dense_s / step if step > 0 else 1.0
        every = self.config.probe_every
        self.stale_gap = max(every, math.ceil(every * (x - 1.0)))
        self.priced, self.priced_step = policy.decision, step

    def compressed(self, obs: Observation) -> None:
        """The decision left a dense level after the dense step ``obs``: that step measured
        what a stale-rate probe would measure, in the same regime, so the first probe's gap
        is priced by it (at the first measured compressed step, :meth:`measured`) instead
        of going after ``probe_every`` steps to measure it again."""
        self.dense_s = obs.compute_s + obs.exposed_s

    def measured(self, policy: ProbeQuestions) -> None:
        """A compressed step was measured: price the gap a dense step left (:meth:`compressed`)."""
        if self.dense_s > 0:
            self._price(policy, self.dense_s)
            self.dense_s = 0.0

    def found_faster(self, obs: Observation, rate_before: float) -> bool:
        """Whether ``obs`` is the stale-rate probe and sensed a rate ``change_factor`` above
        ``rate_before`` (the rate the model had priced the dense levels with)."""
        return (obs.decision == self.stale_probe and obs.rate_Bps > 0 and rate_before > 0
                and obs.rate_Bps >= self.config.change_factor * rate_before)

    def new_regime(self) -> None:
        """A new regime: the next stale-rate probe's cost is unknown again."""
        self.stale_gap, self.priced, self.priced_step = self.config.probe_every, None, 0.0
        self.dense_s = 0.0

    def next(self, policy: ProbeQuestions) -> Decision | None:
        c, m, cur = self.config, policy.model, policy.decision
        stale = self._stale(policy)
        if stale is not None:
            return stale
        self.since_up += 1
        first = m.steps <= 1
        if first or self.after_faster or self.since_up >= 4 * c.probe_every:
            up = self._up(policy)
            urgent = first or self.after_faster
            self.after_faster = False
            if up is not None:
                # Within the budget of the steps since the last such probe, unless the
                # regime is new (the first step, a faster path): then at once.
                extra = m.step_s(up)[0] - m.step_s(cur)[0]
                if urgent or extra <= c.probe_budget * m.step_s(cur)[0] * self.since_up / 4:
                    self.since_up = self.unprobed = 0
                    self.count += 1
                    return dataclasses.replace(up, probe=True)
            if not urgent:
                self.since_up = 0
        kind = kind_of(cur.level)
        here = m.wire_bytes(cur)
        sizes = [x for x in m.groups(kind) if x > 0]
        spread = len(sizes) >= 2 and max(sizes) >= c.min_spread * min(sizes)
        self.unprobed = 0 if spread else self.unprobed + 1
        if self.unprobed < c.probe_every:
            return None
        same_kind = [d for d in policy.candidates() if kind_of(d.level) == kind]
        larger = [d for d in same_kind if m.wire_bytes(d) >= c.min_spread * here]
        if not larger:
            smaller = [d for d in same_kind if m.wire_bytes(d) * c.min_spread <= here]
            if not smaller:
                return None
            probe = max(smaller, key=m.wire_bytes)
        else:
            step, _ = m.step_s(cur)
            _, b, _, _ = m.fit(kind)
            fits = [d for d in larger if b * (m.wire_bytes(d) - here) <= c.probe_budget * step]
            if not fits:
                return None
            probe = min(fits, key=m.wire_bytes)
        self.unprobed = 0
        self.count += 1
        return dataclasses.replace(probe, probe=True)


# ----------------------------------------------------------------------------- policy
class NetSensePolicy:
    """The time-to-accuracy policy of the module docstring.

    ``NetSensePolicy(config=PolicyConfig(...), prior=...)`` or keyword settings
    (``NetSensePolicy(floor=0.01)``, what ``hooks.register`` passes through); ``prior``:
    anything :func:`netsenseml.convergence.load` takes.
    """

    # its traits for the step loop (``netsenseml.loop.AdaptivePolicy``)
    needs_calibration = True  # the hook's registration calibration gives the first decision
    probes_rtt = True  # the tiny RTT collective (``netsenseml.monitor.rtt_probe_due``)
    takes_samples = False  # collectives feed the monitor; its estimate comes with each step
    drains_residual = True  # dense levels drain what sparse steps withheld, bounded
    topk_method: str | None = None  # the hook's ``topk_method`` option

    def __init__(self, config: PolicyConfig | None = None, *,
                 prior: convergence.Prior | Mapping | str | None = None, **settings: Any) -> None:
        unknown = sorted(set(settings) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown policy setting {unknown[0]!r}; accepted: {', '.join(FIELDS)}")
        self.config = dataclasses.replace(config or PolicyConfig(), **settings)
        self.prior = convergence.load(prior)
        self.calibration: Calibration | None = None
        self.model: StepModel | None = None  # type: ignore[assignment]
        self.regime = RegimeDetector(self.config)
        self.hysteresis = Hysteresis(self.config)
        self.prober = Prober(self.config)
        self._candidates = self.config.candidates()
        self.decision = self._candidates[0]
        self.steps = 0
        self.changes = 0
        self.new_regime = False  # the last observation started a new regime
        # observations left in which a move needs no confirmation: a new regime's, until
        # the model has a fresh sensed rate (module docstring, "Decisions")
        self._urgent = 0

    # ------------------------------------------------------------------ convenience
    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.level for d in self._candidates))

    @property
    def floor(self) -> float:
        return self.config.floor

    @property
    def half_level(self) -> str:
        return self.config.half_level

    @property
    def probes(self) -> int:
        return self.prober.count

    def candidates(self) -> list[Decision]:
        return list(self._candidates)

    def fidelity(self, d: Decision) -> tuple[int, float]:
        """Position on the ladder, least compressed first (higher ratio = less compressed)."""
        return (self.levels.index(d.level), -d.ratio)

    # ------------------------------------------------------------------ the objective
    def steps_factor(self, d: Decision) -> float:
        """``c(d)``: the prior factor on the steps to accuracy."""
        return self.prior.factor(d.level, d.ratio)

    def step_s(self, d: Decision) -> float:
        return self._model().step_s(d)[0]

    def cost(self, d: Decision) -> float:
        """``J(d) = c(d) x T(d)``, proportional to the predicted time to accuracy."""
        return self.steps_factor(d) * self.step_s(d)

    def cost_se(self, d: Decision) -> tuple[float, float]:
        t, se = self._model().step_s(d)
        c = self.steps_factor(d)
        return c * t, c * se

    def band(self, a: Decision, b: Decision, ja: tuple[float, float], jb: tuple[float, float]) -> float:
        """``U``: the J difference between ``a`` and ``b`` that the measurements resolve."""
        # A young regime (``_urgent``): the detector has already confirmed the change, and
        # the few samples since make every standard error wide; what separates the
        # candidates then is the size of the change, not its error bars.
        spread = 0.0 if self._urgent > 0 else self.config.confidence * math.hypot(ja[1], jb[1])
        u = spread + self.config.min_gain * min(ja[0], jb[0])
        if abs(self.steps_factor(a) - self.steps_factor(b)) > 1e-9:
            u += self.prior.resolution * min(ja[0], jb[0])
        return u * self.hysteresis.band

    def best(self) -> Decision:
        """The candidate with the smallest ``J`` (ties: the less compressed)."""
        return min(self._candidates, key=lambda d: (self.cost(d), self.fidelity(d)))

    def preferred(self) -> Decision:
        """The least compressed candidate whose ``J`` is within ``U`` of the smallest."""
        return self._select(self._candidates, {d: self.cost_se(d) for d in self._candidates})

    def _select(self, among: list[Decision], js: Mapping[Decision, tuple[float, float]]) -> Decision:
        """The selection rule, once: of ``among`` (least compressed first), the least
        compressed whose ``J`` is within ``U`` of the smallest."""
        best = min(among, key=lambda d: (js[d][0], self.fidelity(d)))
        return next(d for d in among if js[d][0] - js[best][0] <= self.band(d, best, js[d], js[best]))

    def best_at_rate(self, rate: float) -> Decision:
        """The candidate of smallest ``J`` were the sensed rate ``rate`` (probes)."""
        with self._model().assuming_rate(rate):
            return self.best()

    def stats(self) -> dict[str, float]:
        """The model behind the current decision, for step logs (units in the names)."""
        m = self._model()
        d = self.decision
        j, se = self.cost_se(d)
        return {**m.stats(), "model_codec_s": m.codec_s(d.level),
                "model_step_s": self.step_s(d),
                "model_none_step_s": self.step_s(self._candidates[0]),
                "model_J_se_rel": se / j if j > 0 else 0.0}

    def step_stats(self, decision: Decision) -> dict[str, float | int]:
        """:meth:`stats` and whether ``decision`` (the one in use) is a probe, once
        calibrated (the hook's step statistics)."""
        if self.calibration is None:
            return {}
        return {**self.stats(), "probe": int(decision.probe)}

    @staticmethod
    def take_counts() -> tuple[int, int]:
        """The prototype rule's verdict counts: none here."""
        return 0, 0

    # ------------------------------------------------------------------ inputs
    def _model(self) -> StepModel:
        if self.model is None:
            raise RuntimeError("NetSensePolicy.calibrate() must run before the policy decides")
        return self.model

    def calibrate(self, cal: Calibration) -> Decision:
        """Takes the registration calibration's facts; returns the decision for the first step."""
        self.calibration = cal
        self.model = StepModel(self.config, cal)
        self.decision = self.best()
        return self.decision

    def observe(self, obs: Observation) -> Decision:
        """Feeds one step's mean-over-ranks observation; returns the next decision."""
        m = self._model()
        self.steps += 1
        x = m.wire_bytes(obs.decision)
        predicted, _ = m.comm(obs.decision)
        rate_before = m.rate
        m.add(obs)
        m.add_point(obs.decision, obs.comm_s)
        n = 0 if obs.decision.probe else self.regime.check(x, obs.comm_s, predicted)
        self.new_regime = n != 0
        if self.new_regime:
            m.new_regime(abs(n))
            m.restart_rate()
            self.hysteresis.reset()
            self.prober.new_regime()
            # young only after a large slowdown: compressing is then the safe side (a
            # faster path is left on measurements, as ever); a mild one (a few competing
            # streams on a fast link) is judged with the error bars
            big = n > 0 and self.regime.factor >= 2 * self.config.change_factor
            self._urgent = (self.config.change_confirm + self.config.decide_confirm) if big else 0
            if n < 0 and self.fidelity(self.decision) > self.fidelity(self._candidates[0]):
                self.prober.after_faster = True
        if obs.decision.probe:  # a probe is a measurement; it does not vote
            if self.prober.found_faster(obs, rate_before):
                # A stale-rate probe measured the path change_factor faster than the rate
                # the model priced with: the measurement a release waits for is in, so the
                # next decision moves at once, without the back-off the slow phase's
                # reversals left behind.
                self.hysteresis.reset()
                self._urgent = 1
            self.prober.probed(self, obs)
        else:
            if kind_of(obs.decision.level) != "allreduce":
                self.prober.measured(self)
            self._decide()
            if (kind_of(obs.decision.level) == "allreduce"
                    and kind_of(self.decision.level) != "allreduce"):
                self.prober.compressed(obs)
        return self.prober.next(self) or self.decision

    def _decide(self) -> None:
        cur = self.decision
        js = {d: self.cost_se(d) for d in self._candidates}
        target = self._target(cur, js)
        release = self.fidelity(target) < self.fidelity(cur)
        # The first measured steps replace the registration calibration's guess at once, and a
        # new regime (already confirmed by the detector) acts on its first observation
        # with a freshly sensed rate: until the monitor has sampled the new path the
        # unmeasured levels are priced at the old rate, and their confirmations would
        # only add steps at the congested step time.
        at_once = self._urgent > 0 or self.steps <= 2
        moved = self.hysteresis.allow(cur, target, release, at_once=at_once)
        if moved:
            self.decision = target
            self.changes += 1
        if moved or self._model().rate_fresh:
            self._urgent = 0
        elif self._urgent > 0:
            self._urgent -= 1

    def eligible(self, cur: Decision, d: Decision) -> bool:
        """Whether the decision may move from ``cur`` to ``d`` on the model's word (see
        :meth:`_target`): always toward more compression; toward less only where the
        regime measured ``d``'s kind and a size within ``min_spread`` of ``d``'s."""
        if self.fidelity(d) >= self.fidelity(cur):
            return True
        m = self._model()
        if kind_of(d.level) != kind_of(cur.level) and not m.measured(kind_of(d.level)):
            return False
        return m.wire_bytes(d) <= self.config.min_spread * m.largest()

    def _target(self, cur: Decision, js: dict[Decision, tuple[float, float]]) -> Decision:
        """Where the evidence says to go from ``cur`` (``cur`` itself: stay)."""
        jc = js[cur]
        # Less compression is only taken on measurements: a collective kind the current
        # regime has not measured may be predicted too cheap (a congested path slows a
        # long transfer more than the short ones seen), so going there waits for a probe;
        # more compression is the safe side and needs no such proof.
        # Likewise a size more than ``min_spread`` times the largest the regime measured:
        # below a shaper's burst small transfers leave fast, and their slope says nothing
        # of a long transfer's (the probes grow the measured size step by step).
        eligible = [d for d in self._candidates if self.eligible(cur, d)]
        # A significantly better candidate: the least compressed of those within U of the
        # best of them.
        better = [d for d in eligible if jc[0] - js[d][0] > self.band(cur, d, jc, js[d])]
        if better:
            return self._select(better, js)
        # Otherwise: a less compressed candidate that costs no more than now (of equal
        # costs the more faithful; a flat J(r) would otherwise drift to the floor). Across
        # levels not right after a move toward more compression: that move was a
        # significant gain, and a tie that undoes it is a noisy stretch of the current
        # level's samples as often as not (results/policy/README.md, "Ties across
        # levels"); only a significant gain undoes it.
        across = self.hysteresis.last_move is not False
        faithful = [d for d in eligible if (across or d.level == cur.level)
                    and self.fidelity(d) < self.fidelity(cur) and js[d][0] <= jc[0]]
        return faithful[0] if faithful else cur
