"""The NetSenseML authors' prototype rule, as its own method (``netsenseml-paper``).

What the prototype (github.com/asu-gkg/NetSenseML, ``app/ccl/self_comm.py``; read, not
copied: it carries no licence) does, and what this module keeps:

* **Samples per collective.** Every collective of the hook is one sample: its payload
  bytes and its duration. The delivery rate of a sample is payload / duration, the
  whole collective included (the prototype's definition; BBR would subtract the round
  trip).
* **BDP.** Windowed maximum delivery rate x windowed minimum duration ("RTT") over a
  window of ``window_s`` = 5 s.
* **Rule, once per sample.** Payload in flight (the sample's bytes) > ``bdp_gain`` (0.9)
  x BDP -> kept fraction x ``decrease`` (0.95), floor ``floor`` (0.005); otherwise
  + ``increase`` (0.001), cap ``ceiling`` (1.0). Start at ``start`` (0.75). One fraction
  for all buckets; top-k by magnitude (exact ``torch.topk``); at the cap plain fp32
  allreduce.

What this module corrects:

* The prototype returned ``(decompressed sum + local gradient) / 2``; here the sum of all
  ranks' payloads is divided by the world size (DDP's mean), as for every method.
* Its ranks decided alone and then truncated every rank's top-k to the smallest k of any
  rank (dropping arbitrary, not the smallest, elements). Here every rank sends the same k:
  each rank counts its own samples' verdicts, the counts ride (as a mean over ranks) on
  the next step's bucket-0 collective, and every rank applies the same
  ``round(mean congested)`` decreases and ``round(mean samples) - that`` increases (the
  decreases first). The fraction thus changes once per step, by the verdicts of the
  previous step's collectives, and applies one step later than in the prototype (see
  ``netsenseml.policy``, "Timing").
* Its window reset whenever ``now - last_reset >= end_time % 5`` -- a pseudo-random window
  between 0 and 5 s. Here the window is a true sliding 5 s window (``sense.WindowedExtreme``).
* Its decode put gathered values with ``index_put_`` (duplicate indices from different
  ranks overwrote each other); here they are summed.
* At the cap its plain-allreduce path stopped sampling, so the fraction could never leave
  1.0 again; here the allreduce's samples keep feeding the rule.
* It had no error feedback; here the testbed's standard error feedback applies
  (``--no-error-feedback`` turns it off, as for every lossy method).

Consequence of the rule as kept (not a bug of this module): a delivery rate measured over
the whole collective counts the latency as transfer time, so a collective of ``s`` bytes
on a path of rate ``R`` and latency ``L`` is judged uncongested only while
``s <= 0.9 x (largest rate in the window) x (L + s / R)``, about ``s <= 9 R L``: the rule
drives the payload toward a size whose transfer takes ~9 latencies, whatever the compute
time; with one fixed size it always judges congested (BDP = that size). On a slow link
that is the floor; it does not weigh the step's compute at all.

Pure Python (no torch); ``t`` can be passed explicitly for tests, ``netsenseml.clock.now()``
otherwise.
"""

from __future__ import annotations

import threading

from netsenseml import clock
from netsenseml.monitor import WindowedExtreme
from netsenseml.policy import Calibration, Decision, Observation


class PaperRule:
    """The prototype's multiplicative-decrease / additive-increase rule on the kept fraction.

    :meth:`add` is the per-collective sample (the hook's recorder calls it, as it calls a
    :class:`~netsenseml.monitor.NetworkMonitor`); :meth:`take_counts` hands the step's
    verdicts to the step loop (``netsenseml.loop``); :meth:`observe` applies the mean over
    ranks.
    """

    # its traits for the step loop (``netsenseml.loop.AdaptivePolicy``)
    needs_calibration = False  # no registration calibration: it starts at ``start``
    probes_rtt = False  # no tiny RTT collective: its samples are the collectives
    takes_samples = True  # every collective's sample is judged by the rule
    drains_residual = False
    topk_method = "exact"  # the prototype's torch.topk
    half_level = "fp16"
    new_regime = False  # it has no regimes

    def __init__(
        self,
        *,
        start: float = 0.75,
        bdp_gain: float = 0.9,
        decrease: float = 0.95,
        increase: float = 0.001,
        floor: float = 0.005,
        ceiling: float = 1.0,
        window_s: float = 5.0,
    ) -> None:
        if not 0 < floor <= start <= ceiling <= 1:
            raise ValueError(f"need 0 < floor <= start <= ceiling <= 1, got {floor}, {start}, {ceiling}")
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease}")
        if increase < 0 or bdp_gain <= 0:
            raise ValueError("increase must be >= 0 and bdp_gain > 0")
        self.bdp_gain = bdp_gain
        self.decrease = decrease
        self.increase = increase
        self.floor = floor
        self.ceiling = ceiling
        self.ratio = start
        self._rate = WindowedExtreme(window_s, "max")
        self._rtt = WindowedExtreme(window_s, "min")
        self._lock = threading.Lock()
        self._congested = 0
        self._samples = 0
        self.steps = 0

    @classmethod
    def open_loop(cls, steps: int, samples_per_step: int, **options: float) -> list[Decision]:
        """The decision of each of ``steps`` steps when every sample is judged congested
        (``samples_per_step`` collectives a step): the rule's fastest descent from ``start``,
        hence the fewest bytes it can send. Step ``s``'s fraction has the verdicts of steps
        up to ``s - 2`` applied (they ride on the next step's first collective and apply the
        step after: "Timing" above). What a run's time is estimated from before it runs
        (``testbed.config.estimate``): the prototype starts at 0.75, which on a constrained
        link makes its first steps the run's longest."""
        rule = cls(**options)
        out = []
        for s in range(1, max(int(steps), 0) + 1):
            out.append(rule.decision)
            if s >= 2:
                for _ in range(max(int(samples_per_step), 1)):
                    rule.update(True)
        return out

    @property
    def decision(self) -> Decision:
        return Decision("none") if self.ratio >= self.ceiling else Decision("topk", self.ratio)

    # ------------------------------------------------------------------ the rule
    def congested(self, inflight_bytes: float, bdp: float) -> bool:
        return inflight_bytes > self.bdp_gain * bdp

    def update(self, congested: bool) -> float:
        """One application of the rule; returns the new kept fraction."""
        if congested:
            self.ratio = max(self.floor, self.ratio * self.decrease)
        else:
            self.ratio = min(self.ceiling, self.ratio + self.increase)
        return self.ratio

    # ------------------------------------------------------------------ samples
    def add(self, nbytes: float, seconds: float, t: float | None = None) -> None:
        """One collective of this rank: windows updated, then the sample judged."""
        if nbytes <= 0 or seconds <= 0:
            return
        now = clock.now() if t is None else t
        with self._lock:
            self._rate.add(nbytes / seconds, now)
            self._rtt.add(seconds, now)
            rate, rtt = self._rate.value(), self._rtt.value()
            assert rate is not None and rtt is not None
            self._samples += 1
            self._congested += self.congested(nbytes, rate * rtt)

    def bdp(self, now: float | None = None) -> float | None:
        rate, rtt = self._rate.value(now), self._rtt.value(now)
        return None if rate is None or rtt is None else rate * rtt

    def take_counts(self) -> tuple[int, int]:
        """(congested, samples) since the last call."""
        with self._lock:
            out = (self._congested, self._samples)
            self._congested = self._samples = 0
        return out

    def calibrate(self, cal: Calibration) -> Decision:
        """No registration calibration (``needs_calibration`` is False): the first decision."""
        del cal
        return self.decision

    def step_stats(self, decision: Decision) -> dict[str, float | int]:
        """Nothing beyond the hook's own statistics."""
        del decision
        return {}

    def observe(self, obs: Observation) -> Decision:
        """Applies the mean-over-ranks verdict counts of one step (module docstring)."""
        self.steps += 1
        samples = math_round(obs.samples)
        congested = min(math_round(obs.congested), samples)
        for _ in range(congested):
            self.update(True)
        for _ in range(samples - congested):
            self.update(False)
        return self.decision


def math_round(x: float) -> int:
    """Half-up rounding (Python's ``round`` rounds half to even)."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)
