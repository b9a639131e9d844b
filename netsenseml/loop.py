"""The adaptive methods' step loop, written once: the DDP hook, the replay and the SimGrid
simulation feed it measurements; it builds each step's observation, holds the one-step
delay, says when the RTT probe goes and restarts the monitor on a new regime.

The timing (``netsenseml.hooks``, module docstring): bucket 0 of step ``s + 1`` opens the
step; each rank then knows step ``s`` completely and builds its observation of it
(:meth:`StepLoop.observation`: what the caller measured, plus the monitor's rate, min RTT
and queueing delay and the prototype rule's verdict counts). The hook sends it to every
rank as the mean over ranks (:func:`to_wire` / :func:`from_wire`, riding on bucket 0's
collective); when that arrives the policy decides (:meth:`StepLoop.deliver`), and the
decision applies from step ``s + 2`` (:meth:`StepLoop.begin_step`). A replay or a
simulation has one rank stand for all: :meth:`StepLoop.next_step` delivers the previous
step's observation and returns this step's decision, :meth:`StepLoop.end_step` takes the
step's measurements.

A policy is anything with the :class:`AdaptivePolicy` interface: NetSenseML
(``netsenseml.policy.NetSensePolicy``), the prototype's rule
(``netsenseml.paper_rule.PaperRule``) and the adaptive peers StellaTrain
(``netsenseml.stellatrain``) and Accordion (``netsenseml.accordion``). What tells them
apart to the loop and the hook are the traits they declare, never their class.

Pure Python (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from netsenseml.monitor import RTT_PROBE_EVERY, NetworkMonitor, rtt_probe_due
from netsenseml.policy import Calibration, Decision, Observation

#: The per-step values piggy-backed on bucket 0 (units chosen to suit fp16 transport).
EXTRAS = ("valid", "comm_ms", "exposed_ms", "compute_ms", "codec_ms", "bytes_MB",
          "collectives", "overlap_ms", "congested", "samples", "has_rate", "rate_MBps", "rtt_ms",
          "queue_ms")
N_EXTRAS = len(EXTRAS)


@runtime_checkable
class AdaptivePolicy(Protocol):
    """What the step loop and the hook ask of an adaptive policy.

    Traits (class attributes): ``needs_calibration`` (the hook runs the registration calibration
    and :meth:`calibrate` takes it), ``probes_rtt`` (the tiny RTT collective of
    :func:`~netsenseml.monitor.rtt_probe_due`), ``takes_samples`` (every collective's
    ``(bytes, seconds)`` goes to the policy's ``add``, not to the monitor: the prototype's
    per-collective rule), ``drains_residual`` (dense levels drain an error-feedback residual
    at a bounded rate), ``topk_method`` (the top-k selector its levels use; None: the
    hook's option), ``half_level`` (fp16 or bf16). Optional: ``grad_norm_every`` (N > 0:
    the hook accumulates each parameter's local gradient over windows of N steps and the
    observation of a window's last step carries each bucket's norm of it, mean over ranks,
    in ``Observation.grad_norms``; :func:`grad_norm_every` reads it, 0 when absent) and
    ``needs_values`` (its decisions read gradient values, so a run that sends bytes without
    them cannot host it).
    """

    decision: Decision
    new_regime: bool
    needs_calibration: bool
    probes_rtt: bool
    takes_samples: bool
    drains_residual: bool
    topk_method: str | None
    half_level: str

    def calibrate(self, cal: Calibration) -> Decision: ...

    def observe(self, obs: Observation) -> Decision: ...

    def take_counts(self) -> tuple[int, int]: ...

    def step_stats(self, decision: Decision) -> dict[str, float | int]: ...


@dataclass(frozen=True)
class Measured:
    """What the caller measured of one finished step (seconds, bytes; one rank's view)."""

    comm_s: float
    exposed_s: float
    compute_s: float  # the period less the exposed communication (codec included)
    codec_s: float
    bytes_sent: float
    collectives: float
    overlap_s: float = 0.0
    # per DDP bucket, the local gradient's norm accumulated over the window this step
    # closed (``grad_norm_every``); () on every other step and for other policies
    grad_norms: tuple[float, ...] = ()


#: Steps from the observed step to the one its decision applies to (module docstring:
#: observed in step ``s``, delivered during ``s + 1``, applied from ``s + 2``).
DECISION_LAG = 2


def grad_norm_every(policy: object) -> int:
    """Steps per window of accumulated gradient whose per-bucket norms the policy reads
    (the trait ``grad_norm_every`` of :class:`AdaptivePolicy`; 0: none)."""
    every = getattr(policy, "grad_norm_every", 0)
    return int(every) if every else 0


class StepLoop:
    """One adaptive method's step loop (module docstring); one per rank and model.

    ``decision``: what the current step sends; ``observed``: the decision of the step whose
    observation is in flight; ``step``: steps begun.
    """

    def __init__(self, policy: AdaptivePolicy, monitor: NetworkMonitor | None = None,
                 rtt_probe_every: int = RTT_PROBE_EVERY) -> None:
        if rtt_probe_every < 1:
            raise ValueError(f"need rtt_probe_every >= 1, got {rtt_probe_every}")
        self.policy = policy
        self.monitor = monitor if monitor is not None else NetworkMonitor()
        self.rtt_probe_every = rtt_probe_every
        self.decision: Decision = policy.decision
        self.observed: Decision = self.decision
        self.step = 0
        self._pending: Decision | None = None
        self._held: Observation | None = None  # next_step/end_step: the last step's

    # ------------------------------------------------------------------ set-up
    @property
    def sample_sink(self) -> object:
        """Where every collective's sample goes: the policy's rule or the monitor."""
        return self.policy if self.policy.takes_samples else self.monitor

    def calibrate(self, cal: Calibration) -> Decision:
        """The registration calibration's facts: the first step's decision."""
        self.decision = self.observed = self.policy.calibrate(cal)
        return self.decision

    # ------------------------------------------------------------------ the loop
    def begin_step(self) -> Decision:
        """A step begins: the decision delivered during the previous one applies now."""
        self.observed = self.decision
        if self._pending is not None:
            self.decision, self._pending = self._pending, None
        self.step += 1
        return self.decision

    def rtt_probe_due(self) -> bool:
        """Whether this step runs the tiny RTT collective beside its payload."""
        return self.policy.probes_rtt and rtt_probe_due(self.step, self.decision.level,
                                                        self.rtt_probe_every)

    def observation(self, m: Measured) -> Observation:
        """This rank's observation of the step that just ended (before :meth:`begin_step`
        of the next): ``m`` plus the monitor's estimate and the rule's verdict counts."""
        congested, samples = self.policy.take_counts()
        est = self.monitor.estimate()
        return Observation(
            decision=self.decision, comm_s=m.comm_s, exposed_s=m.exposed_s,
            compute_s=m.compute_s, codec_s=m.codec_s, bytes_sent=m.bytes_sent,
            collectives=m.collectives, overlap_s=m.overlap_s,
            rate_Bps=est.max_rate if est is not None and est.max_rate is not None else 0.0,
            min_rtt_s=est.min_rtt if est is not None else 0.0,
            queue_s=est.queue_delay if est is not None else 0.0,
            congested=congested, samples=samples, grad_norms=m.grad_norms)

    def deliver(self, obs: Observation) -> None:
        """The (mean over ranks) observation of step ``s`` reached this rank during step
        ``s + 1``: the policy decides for step ``s + 2``; on a new regime every rank restarts
        its monitor's rate window at the same step (the path changed)."""
        self._pending = self.policy.observe(obs)
        if self.policy.new_regime:
            self.monitor.restart_rate()

    # ------------------------------------------------------------------ one rank for all
    def next_step(self) -> Decision:
        """Replay and simulation: the step begins and the previous step's observation
        reaches the policy; returns this step's decision."""
        self.begin_step()
        if self._held is not None:
            self.deliver(self._held)
            self._held = None
        return self.decision

    def end_step(self, m: Measured) -> Observation:
        """Replay and simulation: the step's measurements; its observation is delivered at
        the next :meth:`next_step`."""
        self._held = self.observation(m)
        return self._held


# --------------------------------------------------------------------------- the wire
def to_wire(obs: Observation) -> list[float]:
    """One rank's observation as the :data:`EXTRAS` values (ms, MB: fp16 carries them),
    followed by its ``grad_norms`` (none but on a window's last step; every rank closes a
    window at the same step, so the lengths agree)."""
    rate = obs.rate_Bps
    return [1.0, obs.comm_s * 1e3, obs.exposed_s * 1e3, obs.compute_s * 1e3, obs.codec_s * 1e3,
            obs.bytes_sent / 1e6, obs.collectives, obs.overlap_s * 1e3, obs.congested,
            obs.samples, float(rate > 0), rate / 1e6, obs.min_rtt_s * 1e3, obs.queue_s * 1e3,
            *obs.grad_norms]


def from_wire(mean: list[float], decision: Decision) -> Observation | None:
    """The mean over ranks of :func:`to_wire`'s values; None where some rank had no
    complete step yet (its values were zeros)."""
    v = dict(zip(EXTRAS, mean[:N_EXTRAS], strict=True))
    if v["valid"] < 0.999:
        return None
    return Observation(
        decision=decision, comm_s=v["comm_ms"] * 1e-3, exposed_s=v["exposed_ms"] * 1e-3,
        compute_s=v["compute_ms"] * 1e-3, codec_s=v["codec_ms"] * 1e-3,
        bytes_sent=v["bytes_MB"] * 1e6, collectives=v["collectives"],
        overlap_s=v["overlap_ms"] * 1e-3, congested=v["congested"], samples=v["samples"],
        # a rate only where every rank sensed one (the mean of a rate and a 0 is none)
        rate_Bps=v["rate_MBps"] * 1e6 if v["has_rate"] >= 0.999 else 0.0,
        min_rtt_s=v["rtt_ms"] * 1e-3, queue_s=v["queue_ms"] * 1e-3,
        grad_norms=tuple(float(x) for x in mean[N_EXTRAS:]))
