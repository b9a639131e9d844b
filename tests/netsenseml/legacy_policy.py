"""The adaptive policy as it was before the monitor-driven step model: a frozen copy,
kept as the reference ``benchmarks/replay_calibrated.py`` replays beside today's policy on
a link calibrated from this policy's own runs (``tests/netsenseml/data/eval-onoff-legacy``).
It is not a test: that replay does not reproduce these runs' idle toggling closely enough
to pin it (the benchmark prints by how much).

Its own docstring follows unchanged.

NetSenseML's adaptive policy: which gradient representation the next step sends.

The algorithm, once
-------------------
**Objective: time to accuracy.** Time to accuracy is (steps the job needs) x (seconds per
step). Compression shortens the step where communication holds it back and costs steps
(how many depends on the workload). Each step the policy picks the representation ``d`` of
the ladder ``none -> fp16 -> int8 -> topk(r)`` (``r`` on a geometric grid of
``ratios_per_decade`` points per decade from ``max_ratio`` down to ``floor``) that minimises
the predicted cost

    J(d) = c(d) x T(d)

``T(d)`` is the predicted seconds of one step that sends ``d`` (all measured, below);
``levels`` restricts the ladder (e.g. to keep a job off top-k). ``c(d) >= 1`` is the
policy's one assumption about convergence: how many more steps ``d`` needs than
uncompressed training, taken from a measured table, ``CONVERGENCE_STEPS`` (steps to 0.95
accuracy on the ``mixture`` workload, 3 seeds, ``benchmarks/convergence.py --workload
mixture``): fp16 and int8 need the steps of allreduce (240), so ``c = 1``
(``fp16_cost = int8_cost = 0``); top-k's rows (273 / 373 / 453 steps at r = 0.1 / 0.01 /
0.001) fit ``c(r) = 1 + topk_cost_per_decade x max(0, log10(topk_free_ratio / r))`` with
0.375 per decade and a free ratio of 0.25 (``fit_topk_cost``: 1.15 / 1.53 / 1.90 for the
measured 1.14 / 1.56 / 1.89). Another workload: re-measure, edit the table.

The table resolves steps to one evaluation interval (20 of 240 steps, 8 %), and the
model's ``T`` has errors of its own; so the policy does not chase the bare argmin. It
*prefers* the least compressed level whose ``J`` is within ``fidelity_tolerance`` (8 %) of
the smallest (within top-k, the ratio of smallest ``J``), and it *leaves* a level for a
more compressed one only when that gains more than ``compress_margin`` (15 %): a dead band
between taking a compression and letting it go, which is what keeps a steady link steady.
On an idle link where the uncompressed exchange is a small part of the step, ``none`` is
preferred; where it is a third of the step (this machine's MLP at 1 Gbit/s), half
precision honestly wins ~20 % and is taken. As the bandwidth share falls, the policy moves
down the ladder, and within top-k ``r`` follows the share: at the optimum the top-k
transfer takes about ``topk_cost_per_decade / ln 10`` (16 %) of the step, so ``r`` is
proportional to the available bandwidth (graded, not a switch to the floor) until it
reaches ``floor``. Where compressing harder no longer shortens the step (latency, standing
queues, codec time), it stops.

**Step model.** ``T(d) = C + K(d) + E(d)`` with the exposed communication
``E(d) = max(comm(d) / n, comm(d) - H)`` and ``comm(d) = a + beta x x(d) + G(d)``:

* ``C`` -- compute: the step period minus the exposed communication minus the codec time,
  as the ``compute_quantile`` (0.1: the 3rd smallest of 20) quantile of the last ``compute_window`` steps. The hook
  can only measure it as a remainder, which also holds whatever else the job does between
  steps (its own small collectives waiting behind a congested queue, data-loading stalls);
  those only ever add (on the emulated links, most steps under 1-2 competing streams), hence
  a low quantile, like BBR's min RTT -- but not the minimum: a busy host jitters compute by
  +-15 % both ways, the minimum sits ~15 % low, and ``c(d)`` multiplies that error
  differently per level (a top-k step looks cheaper than it is).
* ``K(d)`` -- codec: seconds per step to compress ``d`` and decode every rank's payload.
  The registration probe times each level on a gradient-sized tensor; while a level is in
  use, the minimum of its last ``codec_window`` measured values replaces the probe's. This
  is where top-k loses at high rates: selecting k of n elements costs time however little
  the link has to carry.
* ``x(d)`` -- wire bytes: fp32 gradient bytes x bytes ratio (fp16 0.5, int8 0.25, top-k
  ``r x topk_bytes_per_element / 4``) x ``world/2`` for the levels that are all-gathered
  (int8, top-k): per byte handed, a W-rank all-gather moves W/2 times what a ring
  allreduce moves. (So with 8 workers int8 saves nothing over fp32, and the policy knows.)
* ``G(d)`` -- the all-gathered levels' extra fixed cost: the registration probe times a
  one-byte all-gather next to the one-element allreduce; ``comm(d)`` of int8 and top-k
  carries the difference per collective (on the emulated links an all-gather costs
  milliseconds more, which a fit shared with allreduce would read as a narrow link).
* ``a`` and ``beta`` -- the fixed seconds of a step's collectives (latency and standing
  queue, which compression cannot remove) and the seconds per wire byte (the inverse of
  the bandwidth share the job gets now). Least squares of comm time on wire bytes over the
  steps since the last regime change (at most ``fit_window``) and the recent probes, on
  the median comm time of each size over its latest ``size_memory`` steps (a collective's
  time has one-sided noise -- a delay only adds -- and a mean would follow every spike; the
  emulated links show 10x spikes; older steps of a size may predate a change of the share
  too small to reset the fit). While those steps sent
  about one size (largest/smallest < ``min_spread``), or sizes whose comm times differ by
  less than ``noise_mads`` median absolute deviations, the intercept cannot be told from
  the slope: then the intercept of the last fit that could tell them stands (before any,
  the first step's: its comm time beyond what the probe's bandwidth explains, at least
  the probe's latency x the collectives per step) and ``beta`` takes the rest -- so when a
  standing queue appears, it first reads as less bandwidth (more compression, the safe
  side), and the steps at the new size then separate the two. ``a`` is kept at or below
  ``(1 - min_transfer_fraction)`` x the smallest comm time in the fit, so that ``beta``
  stays positive.
* ``H`` and ``n`` -- overlap: DDP launches bucket 0's collective while the backward pass
  still produces the later buckets, so communication can hide in the time from the
  step's first to its last launch (``H``, the minimum over ``overlap_window`` steps); the
  last of the ``n`` collectives is always exposed. The measured exposed time itself would
  not do: at a compressed level everything may hide, which says nothing of how much more
  could. (One bucket per step, as with small models, hides nothing: ``E = comm``.)

**Regime changes.** ``change_confirm`` consecutive steps of one size (within
``min_spread``) whose comm time is ``change_factor`` above -- or below -- the fit's
prediction start a new fit from those steps: the old regime's steps would otherwise hold
the fit back for up to ``fit_window`` steps. One step off is not enough: it is usually a
spike, and acting on it would cost a needless change (and a release on one fast step a
slow uncompressed step) -- unless it is slower by more than ``spike_s`` (250 ms) too:
spikes add a bounded delay (the worst seen on the emulated links, a single 140 ms step, is
below TCP's 200 ms minimum retransmission timeout) while congestion multiplies a long
transfer, and each such step costs more than a transient to a harder compression. After a change of size the
prediction also carries the fit's own error, which the new point corrects, so such a step
does not count. Smaller changes enter the fit as it slides.

**Decisions.** The first decision comes from the registration probe (latency, bandwidth,
codec times of every level, all ranks agreeing on their mean) with the compute time
assumed to be ``initial_compute_s`` (default 0: communication is assumed to dominate until
the first step has measured compute), so the first step already sends what the link calls
for -- no blind uncompressed steps; on a fast idle link the cost is two compressed steps
whose withheld part error feedback delivers later. The first decision after a measured
step is the preferred level (above). After that the policy moves to it only when it
predicts a gain worth the move (hysteresis):

* to a more compressed level: ``J(current) > (1 + compress_margin) x J(preferred)``; to a
  less compressed one: as soon as it is preferred (within ``fidelity_tolerance`` of the
  best). So ``none`` is left where compressing gains more than 15 % and taken back where
  it costs less than 8 % (defaults);
* within top-k: the best ratio is ``ratio_hysteresis`` grid steps away (1.78x) *and*
  ``J`` gains ``ratio_margin``. Near its optimum ``J`` is flat in ``r`` (that is why the
  grid is fine), so a few percent of measurement noise would otherwise move ``r``;
* and the move must be called for ``decide_confirm`` observations in a row (in the same
  direction) -- at once only when the fit has just seen a new regime;
* back-off: a level change that undoes the previous one (back to the level just left)
  without a new regime in between is an oscillation -- two levels in a near tie that the
  noise of the estimates decides. Each such reversal multiplies ``compress_margin`` and
  the confirmation count by ``backoff_factor`` (4; the count up to ``max_confirm``), like
  TCP's retransmission back-off; a new regime, or the bandwidth estimate moving by
  ``backoff_reset`` (2x) from where the back-off grew, resets them.

A steady link therefore keeps its decision; noise must move ``J`` past a margin, for
several steps, to cause a change, and a tie costs at most a move and its reversal.

**Probes.** At one size the split between ``a`` and ``beta`` rests on the last fit that
saw two sizes, and at a small payload on a noisy path the transfer is lost in the latency
noise: after congestion the policy would read the noise as a narrow link and never release.
So, like BBR's periodic probing for bandwidth, when the fit has seen a single size for
``probe_every`` steps the policy sends one step at the smallest candidate with
``min_spread`` times the bytes (``Decision.probe``; the decision itself does not change;
at ``none``, the largest size, the least compressed one ``min_spread`` times smaller),
if the model predicts that step to cost at most ``probe_budget`` x a step more. A probe
whose comm time stays within the noise of the decision's steps says only that the slope
is small: the next one goes ``min_spread`` times further (like TCP's slow start), its cost
budgeted by the slope the last one showed at most. Probes stay
in the fit for ``probe_memory`` steps (unless a regime change, or a probe ``change_factor``
off the earlier ones of its size, clears them), so the split rests on the median of a few
probes, not on one noisy step. The model
over-states that cost exactly when it over-states ``beta``, so a probe is skipped only
where the bandwidth is plainly seen; the probes cost at most ``probe_budget /
probe_every`` (2.5 %) of the time.

**Timing.** Ranks must take identical decisions, so the policy sees the mean over ranks of
each step's measurements, piggy-backed on the next step's bucket-0 collective (no extra
round trip; ``netsenseml.hooks``). The decision therefore applies one step later than the
measurement could: a step ``s`` is observed when step ``s+1``'s bucket 0 completes and its
decision applies from step ``s+2``. Applying it to the remaining buckets of step ``s+1``
would save a step on multi-bucket models but lets ranks see the decision at different
buckets (each rank's bucket-0 completion races its next bucket), which the sized
all-gather of top-k cannot tolerate. The lag matters little: a step is the policy's unit
of time, a bandwidth change is acted upon ``change_confirm + 1`` steps after it (4 steps at
the old level; 2 where each is more than ``spike_s`` slower), and the start has no lag at
all (the probe).

**Bounds** (``tests/netsenseml/test_sense_policy.py`` checks them on synthetic traces, with
10 % jitter and spikes, and with the host noise of the real runs, 15 % jitter on compute
and on communication each): the first step sends the probe's decision; a stepwise drop
of the share gives a monotone stepwise increase of compression (the decision held at the
end of each level never sends more than at the level before; at most 2 single steps back
up the ladder per trace); when the share drops by ``change_factor`` or more the policy
compresses harder from the 5th step of the drop on (``change_confirm + 2``; the 3rd where
each slow step is more than ``spike_s`` slower); when congestion ends it is back at
``none`` (where that is preferred) within 7 steps (measured: 4-5); a steady link makes
zero level changes from step 10 on (the probe's decision, the first measured one and one
correction as the fit sees a second size come first), a near tie at most 3.

Pure Python (no torch) and deterministic, so that identical inputs on every rank give
identical decisions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from netsenseml import methods
from netsenseml.policy import Calibration, Decision, Observation  # noqa: F401

#: The policy's levels, least reduction first (``bf16`` stands in for ``fp16`` through
#: ``half_level``); each is a ``ladder`` level of the method registry.
LADDER: tuple[str, ...] = ("none", "fp16", "int8", "topk")
assert set(LADDER) <= {i.label for i in methods.ladder()}, "policy levels must be registry ladder levels"
GATHERED = ("int8", "topk")  # levels exchanged by all-gather (per-rank payloads)

#: Steps to 0.95 held-out accuracy on the ``mixture`` workload (MLP width 2048, 2 ranks,
#: batch 32, evaluated every 20 steps; mean of seeds 0, 1, 2), measured on loopback with
#: ``benchmarks/convergence.py --workload mixture`` (issue 10's convergence table). The
#: priors ``c(d)`` below come from this table and from nowhere else; re-measure and edit it
#: for another workload. Keys: registry method names.
CONVERGENCE_STEPS: dict[str, float] = {
    "allreduce": 240, "fp16": 240, "int8": 240,
    "topk:0.1": 273, "topk:0.01": 373, "topk:0.001": 453,
    "dgc:0.01": 320, "powersgd:4": 347,
}


def dense_costs(table: Mapping[str, float] = CONVERGENCE_STEPS) -> dict[str, float]:
    """``c(d) - 1`` of the dense levels: their steps over allreduce's, less one."""
    base = table["allreduce"]
    return {lvl: max(0.0, table[lvl] / base - 1.0) for lvl in ("fp16", "int8")}


def fit_topk_cost(table: Mapping[str, float] = CONVERGENCE_STEPS) -> tuple[float, float]:
    """``(per_decade, free_ratio)`` of ``c(r) = 1 + per_decade x max(0, log10(free_ratio / r))``.

    Least squares of ``c(r) - 1`` on ``log10(1/r)`` over the table's top-k rows; the line
    crosses zero at ``free_ratio``: keeping more than that costs no measurable steps (on
    ``mixture``: 0.375 per decade, free above r = 0.26; it reproduces 1.14 / 1.56 / 1.89 at
    r = 0.1 / 0.01 / 0.001 as 1.16 / 1.53 / 1.91).
    """
    base = table["allreduce"]
    pts = [(math.log10(1.0 / float(k.split(":")[1])), v / base - 1.0) for k, v in table.items() if k.startswith("topk:")]
    if len(pts) < 2:
        raise ValueError("fit_topk_cost needs at least two topk:<ratio> rows")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    if slope <= 0:
        raise ValueError("fit_topk_cost: the table's top-k rows do not cost more steps at smaller ratios")
    zero = mx - my / slope  # log10(1/r) where the line crosses c = 1
    return slope, min(1.0, 10.0 ** (-zero))


DENSE_COSTS = dense_costs()
TOPK_COST = fit_topk_cost()


def bytes_ratio(level: str, ratio: float = 1.0, bytes_per_element: float = 8.0) -> float:
    """Bytes handed to torch.distributed relative to the fp32 gradient.

    Dense levels: the registry's ``wire``; top-k: value + index bytes of the job's index
    dtype (``bytes_per_element``) per kept element.
    """
    if level == "topk":
        return ratio * bytes_per_element / 4.0
    return methods.bytes_ratio(level)


class NetSensePolicy:
    """The time-to-accuracy policy of the module docstring; every constant is a parameter."""

    def __init__(
        self,
        *,
        levels: tuple[str, ...] = LADDER,
        half_level: str = "fp16",
        floor: float = 0.005,
        max_ratio: float = 0.25,
        ratios_per_decade: int = 8,
        fp16_cost: float = DENSE_COSTS["fp16"],
        int8_cost: float = DENSE_COSTS["int8"],
        topk_cost_per_decade: float = TOPK_COST[0],
        topk_free_ratio: float = TOPK_COST[1],
        fidelity_tolerance: float = 0.08,
        compress_margin: float = 0.15,
        ratio_hysteresis: int = 2,
        ratio_margin: float = 0.01,
        decide_confirm: int = 3,
        max_confirm: int = 48,
        backoff_factor: float = 4.0,
        backoff_reset: float = 2.0,
        change_factor: float = 2.0,
        change_confirm: int = 3,
        spike_s: float = 0.25,
        fit_window: int = 20,
        min_spread: float = 3.0,
        min_transfer_fraction: float = 0.1,
        compute_window: int = 20,
        compute_quantile: float = 0.1,
        codec_window: int = 5,
        overlap_window: int = 5,
        probe_every: int = 20,
        probe_budget: float = 0.5,
        probe_memory: int = 20,
        size_memory: int = 5,
        noise_mads: float = 4.0,
        initial_compute_s: float = 0.0,
    ) -> None:
        if half_level not in ("fp16", "bf16"):
            raise ValueError(f"half_level must be 'fp16' or 'bf16', got {half_level!r}")
        if not levels or any(lvl not in LADDER for lvl in levels):
            raise ValueError(f"levels must be a non-empty subset of {LADDER}, got {levels!r}")
        if not 0 < floor <= max_ratio <= 1:
            raise ValueError(f"need 0 < floor <= max_ratio <= 1, got floor={floor}, max_ratio={max_ratio}")
        if ratios_per_decade < 1:
            raise ValueError(f"ratios_per_decade must be >= 1, got {ratios_per_decade}")
        if min(fp16_cost, int8_cost, topk_cost_per_decade) < 0 or not 0 < topk_free_ratio <= 1:
            raise ValueError("need fp16_cost, int8_cost, topk_cost_per_decade >= 0 and 0 < topk_free_ratio <= 1")
        if not 0 <= fidelity_tolerance < compress_margin:
            # The dead band between taking a compression (a gain above compress_margin) and
            # letting it go (a gain below fidelity_tolerance) is what keeps a steady link
            # steady; without it the noise of J alone moves the level.
            raise ValueError("need 0 <= fidelity_tolerance < compress_margin")
        if not 1 <= decide_confirm <= max_confirm:
            raise ValueError("need 1 <= decide_confirm <= max_confirm")
        if backoff_factor < 1 or backoff_reset <= 1:
            raise ValueError(f"need backoff_factor >= 1 and backoff_reset > 1, got {backoff_factor}, {backoff_reset}")
        if ratio_margin < 0:
            raise ValueError(f"ratio_margin must be >= 0, got {ratio_margin}")
        if ratio_hysteresis < 1:
            raise ValueError(f"ratio_hysteresis must be >= 1 grid step, got {ratio_hysteresis}")
        if change_factor <= 1:
            raise ValueError(f"change_factor must be > 1, got {change_factor}")
        if min(change_confirm, fit_window, compute_window, codec_window, overlap_window) < 1:
            raise ValueError("change_confirm and every *_window must be >= 1")
        if change_confirm > fit_window:
            raise ValueError("change_confirm must be <= fit_window")
        if not 0 <= compute_quantile < 0.5:
            raise ValueError(f"compute_quantile must be in [0, 0.5), got {compute_quantile}")
        if min_spread <= 1:
            raise ValueError(f"min_spread must be > 1, got {min_spread}")
        if not 0 < min_transfer_fraction < 1:
            raise ValueError(f"min_transfer_fraction must be in (0, 1), got {min_transfer_fraction}")
        if spike_s < 0:
            raise ValueError(f"spike_s must be >= 0, got {spike_s}")
        if probe_every < 1 or probe_budget < 0 or probe_memory < 1 or size_memory < 1:
            raise ValueError("need probe_every, probe_memory, size_memory >= 1 and probe_budget >= 0")
        if initial_compute_s < 0:
            raise ValueError(f"initial_compute_s must be >= 0, got {initial_compute_s}")
        self.half_level = half_level
        self.levels = tuple(half_level if lvl == "fp16" else lvl for lvl in LADDER if lvl in levels)
        self.floor = floor
        self.max_ratio = max_ratio
        self.costs = {"none": 0.0, half_level: fp16_cost, "int8": int8_cost}
        self.topk_cost_per_decade = topk_cost_per_decade
        self.topk_free_ratio = topk_free_ratio
        self.fidelity_tolerance = fidelity_tolerance
        self.compress_margin = compress_margin
        self.ratio_hysteresis = ratio_hysteresis
        self.ratio_margin = ratio_margin
        self.decide_confirm = decide_confirm
        self.max_confirm = max_confirm
        self.backoff_factor = backoff_factor
        self.backoff_reset = backoff_reset
        self._band_beta = 0.0  # the bandwidth estimate (s/byte) when the back-off last grew
        self._confirm = decide_confirm  # grows on reversals (see _decide)
        self._band = 1.0  # multiplies compress_margin; grows on reversals
        self._last_move: tuple[str, int] | None = None  # (level left, step) of the last level change
        self._want_release = False
        self._want_count = 0
        self._new_regime = False
        self.change_factor = change_factor
        self.change_confirm = change_confirm
        self.spike_s = spike_s
        self.min_spread = min_spread
        self.min_transfer_fraction = min_transfer_fraction
        self.initial_compute_s = initial_compute_s
        self.compute_quantile = compute_quantile
        self.probe_every = probe_every
        self.probe_budget = probe_budget
        self.probe_memory = probe_memory
        self.size_memory = size_memory
        self.noise_mads = noise_mads
        self._unprobed = 0  # steps since the last probe or since the window saw two sizes
        self._probe_points: deque[tuple[float, float, int]] = deque()  # (x, y, step)
        self._probe_growth = min_spread  # bytes factor of the next probe
        self._probe_slope: float | None = None  # s/byte the last, inconclusive probe showed
        self.probes = 0
        self.ratios = self._grid(max_ratio, floor, ratios_per_decade)
        self.calibration: Calibration | None = None
        self.decision = self.candidates()[0]
        self.steps = 0  # observations so far
        self.changes = 0  # decision changes so far
        # The step model (see module docstring); public for tests and benchmarks.
        self.a = 0.0
        self.beta = 0.0
        self._points: deque[tuple[float, float, int]] = deque(maxlen=fit_window)  # (x, y, step)
        self._off = 0  # consecutive same-size steps off the prediction, signed
        self._a_fitted: float | None = None
        self._trust_probe = True  # until the first regime change (see _fit)
        self._collectives = 1.0
        self._compute: deque[float] = deque(maxlen=compute_window)
        self._hidden: deque[float] = deque(maxlen=overlap_window)
        self._codec: dict[str, deque[float]] = {
            lvl: deque(maxlen=codec_window) for lvl in ("none", half_level, "int8", "topk")
        }

    @staticmethod
    def _grid(top: float, floor: float, per_decade: int) -> tuple[float, ...]:
        out, i = [], 0
        while (r := top * 10 ** (-i / per_decade)) > floor * (1 + 1e-9):
            out.append(r)
            i += 1
        return (*out, floor)

    # ------------------------------------------------------------------ the model
    def wire_bytes(self, d: Decision) -> float:
        """Bytes ``d`` puts on the wire per step, in fp32-allreduce-equivalent bytes."""
        cal = self._cal()
        b = cal.dense_bytes * bytes_ratio(d.level, d.ratio, cal.topk_bytes_per_element)
        return b * max(1.0, cal.world_size / 2) if d.level in GATHERED else b

    def compute_s(self) -> float:
        if not self._compute:
            return self.initial_compute_s
        v = sorted(self._compute)
        return v[round(self.compute_quantile * (len(v) - 1))]

    def codec_s(self, level: str) -> float:
        seen = self._codec.get(level)
        if seen:
            return min(seen)
        return float(self._cal().codec_s.get(level, 0.0))

    def gather_extra_s(self, d: Decision) -> float:
        """Fixed seconds an all-gathered level's collectives take beyond an allreduce's
        (the probe's one-element all-gather minus its one-element allreduce)."""
        cal = self._cal()
        if d.level not in GATHERED or cal.gather_latency_s is None:
            return 0.0
        return self._collectives * max(0.0, cal.gather_latency_s - cal.latency_s)

    def step_s(self, d: Decision) -> float:
        """Predicted seconds of one step that sends ``d``: ``C + K(d) + exposed comm``."""
        hidden = min(self._hidden) if self._hidden else 0.0
        comm = self.a + self.beta * self.wire_bytes(d) + self.gather_extra_s(d)
        exposed = max(comm / self._collectives, comm - hidden)
        return self.compute_s() + self.codec_s(d.level) + exposed

    def steps_factor(self, d: Decision) -> float:
        """``c(d)``: the prior factor on the steps to accuracy."""
        if d.level == "topk":
            return 1.0 + self.topk_cost_per_decade * max(0.0, math.log10(self.topk_free_ratio / d.ratio))
        return 1.0 + self.costs[d.level]

    def cost(self, d: Decision) -> float:
        """``J(d) = c(d) x T(d)``, proportional to the predicted time to accuracy."""
        return self.steps_factor(d) * self.step_s(d)

    def candidates(self) -> list[Decision]:
        """The ladder (the allowed ``levels``), least compressed first."""
        dense = [Decision(lvl) for lvl in self.levels if lvl != "topk"]
        return dense + ([Decision("topk", r) for r in self.ratios] if "topk" in self.levels else [])

    def best(self) -> Decision:
        """The candidate with the smallest ``J`` (ties: the less compressed)."""
        best, best_j = None, math.inf
        for d in self.candidates():
            j = self.cost(d)
            if j < best_j:
                best, best_j = d, j
        assert best is not None
        return best

    def preferred(self) -> Decision:
        """The least compressed level whose ``J`` is within ``fidelity_tolerance`` of the
        smallest (within top-k, the ratio of smallest ``J``): a compression must buy more
        than the priors' resolution to be used."""
        per_level: dict[str, tuple[float, Decision]] = {}
        for d in self.candidates():
            j = self.cost(d)
            if d.level not in per_level or j < per_level[d.level][0]:
                per_level[d.level] = (j, d)
        bound = (1 + self.fidelity_tolerance) * min(j for j, _ in per_level.values())
        return next(d for j, d in per_level.values() if j <= bound)

    def stats(self) -> dict[str, float]:
        """The model behind the current decision, for step logs (units in the names)."""
        d = self.decision
        return {
            "model_fixed_ms": 1e3 * self.a,
            "model_bw_MBps": 1e-6 / self.beta if self.beta > 0 else float("inf"),
            "model_compute_ms": 1e3 * self.compute_s(),
            "model_codec_ms": 1e3 * self.codec_s(d.level),
            "model_step_ms": 1e3 * self.step_s(d),
            "model_none_step_ms": 1e3 * self.step_s(Decision("none")),
        }

    # ------------------------------------------------------------------ inputs
    def _cal(self) -> Calibration:
        if self.calibration is None:
            raise RuntimeError("NetSensePolicy.calibrate() must run before the policy decides")
        return self.calibration

    def calibrate(self, cal: Calibration) -> Decision:
        """Takes the registration probe's facts; returns the decision for the first step."""
        if cal.dense_bytes <= 0 or cal.world_size < 1:
            raise ValueError("calibration needs dense_bytes > 0 and world_size >= 1")
        self.calibration = cal
        self.a = max(0.0, cal.latency_s)
        self.beta = max(0.0, cal.s_per_byte)
        self.decision = self.best()
        return self.decision

    def observe(self, obs: Observation) -> Decision:
        """Feeds one step's mean-over-ranks observation; returns the next decision."""
        self._cal()
        self.steps += 1
        self._collectives = max(1.0, float(round(obs.collectives)))
        x = self.wire_bytes(obs.decision)
        y = max(obs.comm_s - self.gather_extra_s(obs.decision), 0.0)
        if obs.decision.probe:
            self._add_probe(x, y)
        else:
            self._track_regime(x, y)
        self._fit()
        self._compute.append(max(obs.compute_s - obs.codec_s, 0.0))
        self._hidden.append(max(obs.overlap_s, 0.0))
        if obs.decision.level in self._codec:
            self._codec[obs.decision.level].append(max(obs.codec_s, 0.0))
        self._decide()
        return self._probe() or self.decision

    def _probe(self) -> Decision | None:
        """A one-step probe when the fit has seen one size for ``probe_every`` steps."""
        xs = [p[0] for p in self._points]
        spread = len(xs) >= 2 and min(xs) > 0 and max(xs) >= self.min_spread * min(xs)
        self._unprobed = 0 if spread else self._unprobed + 1
        if self._unprobed < self.probe_every:
            return None
        cur = self.decision
        here = self.wire_bytes(cur)
        larger = [d for d in self.candidates() if self.wire_bytes(d) > here]
        if not larger:
            # At the largest size (``none``) the probe goes down instead: one step at the
            # least compressed candidate ``min_spread`` times smaller (it costs no time).
            # Without it a wrong first split -- a registration probe that a token bucket's
            # burst let through at line rate reads a narrow link's transfer as latency --
            # would keep the policy from ever seeing what compression gains.
            smaller = [d for d in self.candidates() if self.wire_bytes(d) * self.min_spread <= here]
            if not smaller:
                return None
            probe = max(smaller, key=self.wire_bytes)
            self._unprobed = 0
            self.probes += 1
            return Decision(probe.level, probe.ratio, probe=True)
        # Its cost: the slope the last probe showed, where that one was lost in the noise;
        # the model's otherwise (which over-states it when beta is unknown). The largest
        # candidate up to the target size that fits the budget.
        slope = self.beta if self._probe_slope is None else min(self.beta, self._probe_slope)
        budget = self.probe_budget * self.step_s(cur)
        need = self._probe_growth * here
        fits = [d for d in reversed(larger) if slope * (self.wire_bytes(d) - here) <= budget]
        if not fits:
            return None
        probe = ([d for d in fits if self.wire_bytes(d) <= need] or fits[:1])[-1]
        self._unprobed = 0
        self.probes += 1
        return Decision(probe.level, probe.ratio, probe=True)

    def _track_regime(self, x: float, y: float) -> None:
        # Only a step of the previous step's size tests for a new regime: after a change
        # of size the prediction also carries the fit's error, which the new point corrects.
        last = self._points[-1][0] if self._points else 0.0
        same = last > 0 and max(x, last) < self.min_spread * min(x, last)
        predicted = self.a + self.beta * x
        self._new_regime = False
        if same and y > self.change_factor * predicted:
            self._off = max(self._off, 0) + 1
        elif same and y * self.change_factor < predicted:
            self._off = min(self._off, 0) - 1
        else:
            self._off = 0
        self._points.append((x, y, self.steps))
        # A delay longer than any spike is congestion already (spikes add a roughly
        # fixed time; congestion multiplies a long transfer).
        at_once = self._off > 0 and y - predicted > self.spike_s
        if abs(self._off) >= self.change_confirm or at_once:
            self._new_regime = True
            self._trust_probe = False
            keep = list(self._points)[-abs(self._off) :]
            self._points.clear()
            self._probe_points.clear()
            self._probe_growth, self._probe_slope = self.min_spread, None
            self._points.extend(keep)
            self._off = 0

    def _add_probe(self, x: float, y: float) -> None:
        same = [q[1] for q in self._probe_points if q[0] == x]
        if same and not 1 / self.change_factor <= y / _median(same) <= self.change_factor:
            self._probe_points.clear()  # the path changed since those probes
        self._probe_points.append((x, y, self.steps))
        # Lost in the noise? Then the next probe goes min_spread times further (like TCP's
        # slow start), budgeted by the slope this one showed at most.
        here = self.wire_bytes(self.decision)
        ys = [q[1] for q in reversed(self._points) if q[0] == here][: self.size_memory]
        if not ys or x <= here:
            return
        base = _median(ys)
        noise = self.noise_mads * _median([abs(v - base) for v in ys])
        if y - base > noise:
            self._probe_growth, self._probe_slope = self.min_spread, None
        else:
            self._probe_growth *= self.min_spread
            self._probe_slope = max(y - base, noise / self.noise_mads) / (x - here)

    def _fit(self) -> None:
        # Medians per size: a collective's time has one-sided noise (a delay only adds),
        # so a mean would follow every spike.
        # Each size by its latest ``size_memory`` steps: an older step of that size may
        # belong to a share that has changed since by less than ``change_factor``.
        while self._probe_points and self._probe_points[0][2] <= self.steps - self.probe_memory:
            self._probe_points.popleft()
        groups: dict[float, list[float]] = {}
        for x, y, _ in sorted((*self._points, *self._probe_points), key=lambda p: -p[2]):
            if len(groups.setdefault(x, [])) < self.size_memory:
                groups[x].append(y)
        xs = sorted(groups)
        med = {x: _median(groups[x]) for x in xs}
        w = {x: len(groups[x]) for x in xs}
        # The sizes tell intercept from slope only where their comm times differ by more
        # than the noise (``noise_mads`` median absolute deviations within the sizes).
        noise = _median([abs(y - med[x]) for x in xs for y in groups[x]])
        if (
            len(xs) >= 2
            and xs[0] > 0
            and xs[-1] >= self.min_spread * xs[0]
            and med[xs[-1]] - med[xs[0]] > self.noise_mads * noise
        ):
            n = sum(w.values())
            mx = sum(w[x] * x for x in xs) / n
            my = sum(w[x] * med[x] for x in xs) / n
            sxx = sum(w[x] * (x - mx) ** 2 for x in xs)
            sxy = sum(w[x] * (x - mx) * (med[x] - my) for x in xs)
            a = my - (sxy / sxx) * mx
            self._a_fitted = max(a, 0.0)
        elif self._a_fitted is not None:  # one size: the last identified intercept stands
            a = self._a_fitted
        elif self._trust_probe:  # the first step: the probe's slope, ``a`` the rest, kept
            cal = self._cal()
            a = max(self._collectives * cal.latency_s, min(med[x] - cal.s_per_byte * x for x in xs))
            self._a_fitted, self._trust_probe = max(a, 0.0), False
        else:
            a = self._collectives * self._cal().latency_s
        self.a = min(max(a, 0.0), (1 - self.min_transfer_fraction) * min(med.values()))
        sxx0 = sum(w[x] * x * x for x in xs)
        if sxx0 > 0:
            self.beta = max(sum(w[x] * (med[x] - self.a) * x for x in xs) / sxx0, 0.0)

    def _grid_index(self, ratio: float) -> int:
        return min(range(len(self.ratios)), key=lambda i: abs(math.log(self.ratios[i] / ratio)))

    def _decide(self) -> None:
        best = self.preferred()
        cur = self.decision
        release = self._fidelity(best) < self._fidelity(cur)
        if self.steps > 1 and best != cur:  # the first measured step decides freely
            if best.level == cur.level == "topk":
                moved = abs(self._grid_index(best.ratio) - self._grid_index(cur.ratio))
                if moved < self.ratio_hysteresis or self.cost(cur) <= (1 + self.ratio_margin) * self.cost(best):
                    best = cur
            elif not release and self.cost(cur) <= (1 + self._band * self.compress_margin) * self.cost(best):
                # Leaving a less compressed level needs a gain of compress_margin; coming
                # back needs only that it is within fidelity_tolerance (``preferred``).
                best = cur
        if best == cur:
            self._want_count = 0
            return
        # Persistence: the move must be called for ``decide_confirm`` observations in a row
        # (in the same direction), unless the fit has just seen a new regime.
        self._want_count = self._want_count + 1 if self._want_release == release else 1
        self._want_release = release
        moved = self._band > 1 and not (
            self._band_beta / self.backoff_reset <= self.beta <= self._band_beta * self.backoff_reset)
        if self._new_regime or moved:  # the tie the back-off was for has gone
            self._confirm, self._band, self._last_move = self.decide_confirm, 1.0, None
        if self.steps > 1 and not self._new_regime and self._want_count < self._confirm:
            return
        self._want_count = 0
        if best.level != cur.level:
            # Back-off: a level change that undoes the previous one in the same regime is
            # an oscillation (the two levels are a near tie that the noise decides); each
            # one multiplies the confirmation and the compress margin the next level
            # change needs by backoff_factor, like TCP's retransmission back-off, until a
            # new regime resets them.
            last = self._last_move
            if last is not None and last[0] == best.level:
                self._confirm = min(round(self.backoff_factor * self._confirm), self.max_confirm)
                self._band *= self.backoff_factor
                self._band_beta = self.beta
            self._last_move = (cur.level, self.steps)
        self.decision = best
        self.changes += 1

    def _fidelity(self, d: Decision) -> tuple[int, float]:
        """Position on the ladder, least compressed first (higher ratio = less compressed)."""
        return (self.levels.index(d.level), -d.ratio)


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
