"""The state of one registered hook, in small documented parts (as torch's ``PowerSGDState``
groups its fields): the options (frozen), the codecs, the step statistics, the step timer
that measures what the adaptive loop observes, and the loop itself (``netsenseml.loop``).

:class:`NetSenseState` holds them, with the parts the hook shares with the rest of the
library: the recorder of collectives (``netsenseml.comm``), the network monitor
(``netsenseml.monitor``), the error-feedback memory (``netsenseml.memory``), the emulated
accelerator's pacer (``netsenseml.accelerator``) and, under the testbed, the own job's
recorder (``netsenseml.job``). The hooks (``netsenseml.hooks``) read and feed it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from netsenseml import accelerator, clock, compress, memory, methods
from netsenseml.comm import CommRecorder, CommTotals
from netsenseml.compress.base import declare
from netsenseml.gradnorms import GradNorms
from netsenseml.loop import (
    N_EXTRAS,
    AdaptivePolicy,
    Measured,
    StepLoop,
    from_wire,
    grad_norm_every,
    to_wire,
)
from netsenseml.memory import ResidualMemory
from netsenseml.methods import MethodSpec
from netsenseml.monitor import RTT_PROBE_EVERY, NetworkMonitor, TcpInfoSensor
from netsenseml.payload import PayloadCodec
from netsenseml.policy import Calibration, Decision


@dataclass(frozen=True)
class HookOptions:
    """The options of one registered hook (``hooks.register`` takes each by name)."""

    error_feedback: bool = True  # lossy levels keep what they did not send (netsenseml.memory)
    monitor_rate_window: int = 8  # rate samples the monitor's window holds
    # of that window: "sustained" (issue 49; netsense ab against "max", 6 seeds: time to
    # accuracy 1.03x [0.89, 1.19] on accel-d70, 0.98x [0.88, 1.09] on accel-ramp; on d70 its
    # congested-phase error a median 0.9x the fair share where max's is 2.8x, and <= 1 level
    # change a congested phase in 5 of 6 seeds, max's in 2), "max" (BBR's) or "median"
    monitor_rate_filter: str = "sustained"
    monitor_min_rate_bytes: float = 512 * 1024  # shorter transfers are no rate samples
    # netsenseml's tiny RTT collective every this many steps, and on every dense step
    rtt_probe_every: int = RTT_PROBE_EVERY
    # a dense level adds at most this times the gradient's norm of the residual per step
    residual_drain: float = 1.0
    # netsenseml's top-k: "auto" uses the sampled selector while it keeps 90 % of the exact
    # top-k's L2 mass; "exact", "sampled"
    topk_method: str = "auto"
    dgc_momentum: float = 0.9
    seed: int = 0  # random-k's shared seed
    # hook methods: a bucket waits for the previous one (the hooks' module docstring)
    serialize_buckets: bool = True
    memory_kind: str = "residual"  # or "momentum" (DGC's momentum correction; the registry's)
    # payload mode: the codecs send zeros of their real sizes, nothing is decoded and no
    # error feedback is kept (netsenseml.payload); set by hooks.build, not a user's option
    payload: bool = False

    def __post_init__(self) -> None:
        if self.rtt_probe_every < 1 or self.residual_drain <= 0:
            raise ValueError(f"need rtt_probe_every >= 1 and residual_drain > 0, got "
                             f"{self.rtt_probe_every}, {self.residual_drain}")


#: DDP's start-up steps: the first runs on the buckets built at construction; DDP rebuilds
#: them once, at the start of the second (in the order the gradients arrived), so the
#: second is the first on the final layout and pays its one-off costs (new buffers of
#: those sizes in the collectives). Marked ``startup`` in the step statistics.
DDP_STARTUP_STEPS = 2

#: the options ``hooks.register`` takes for every method (the pacer is no option: a part)
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(HookOptions)
                     if f.name not in ("memory_kind", "payload"))


class Codecs:
    """The compressors a hook uses: a fixed method's one, or an adaptive method's ladder
    (one per level label; top-k the policy's selector), built once."""

    def __init__(self, compressor: compress.Compressor | None, policy: AdaptivePolicy | None,
                 topk_method: str, payload: bool = False) -> None:
        wrap = PayloadCodec if payload else (lambda c: c)  # payload mode: netsenseml.payload
        # a plug-in's optional members defaulted once, here where it enters (compress.base)
        self.fixed = None if compressor is None else wrap(declare(compressor))
        self.ladder: dict[str, compress.Compressor] = {}
        if policy is not None:
            for spec in methods.ladder_specs():
                self.ladder[spec.label] = wrap(methods.resolve(spec).build())
            self.ladder["topk"] = wrap(compress.TopKCompressor(0.1, method=policy.topk_method or topk_method))

    def for_decision(self, decision: Decision) -> compress.Compressor:
        """The ladder's compressor of ``decision``, set to its kept fraction."""
        compressor = self.ladder[decision.level]
        if decision.level == "topk":
            compressor.ratio = decision.ratio  # type: ignore[attr-defined]
        return compressor


class StepStatistics:
    """Cumulative counts of the hook; each reader of step statistics keeps its own cursor
    into them (the job's own ``pop_step_stats`` and, in an own job, the testbed's records).
    Completion callbacks count from the process group's threads, hence the lock."""

    def __init__(self, recorder: CommRecorder) -> None:
        self.recorder = recorder
        self.lock = threading.Lock()
        self.kept = self.elements = self.dense = 0
        self.codec = 0.0
        self.user = self.cursor()
        self.job = self.cursor()

    def cursor(self) -> dict[str, Any]:
        return {"totals": self.recorder.totals(), "kept": self.kept, "elements": self.elements,
                "dense": self.dense, "codec": self.codec, "rate_seen": 0}

    def count(self, kept: int, elements: int, dense_bytes: int, codec_s: float) -> None:
        with self.lock:
            self.kept += kept
            self.elements += elements
            self.dense += dense_bytes
            self.codec += codec_s

    def codec_total(self) -> float:
        with self.lock:
            return self.codec

    def take(self, cur: dict[str, Any], totals: CommTotals, bytes_only: bool,
             decision: Decision) -> dict[str, Any]:
        """The counts since ``cur`` (call with :attr:`lock` held), which moves to now, and
        ``decision``'s level and ratio; ``bytes_only``: a raw hook, whose kept elements are
        not known."""
        prev = cur["totals"]
        sent = int(totals.bytes_sent - prev.bytes_sent)
        dense = int(self.dense - cur["dense"])
        kept_n, elements = self.kept - cur["kept"], self.elements - cur["elements"]
        if bytes_only:
            kept = sent / dense if dense else 1.0
        else:
            kept = kept_n / elements if elements else 1.0
        out = {"bytes_sent": sent, "comm_s": float(totals.busy_s - prev.busy_s),
               "kept_ratio": float(kept), "level": decision.level, "ratio": float(decision.ratio),
               "codec_s": float(self.codec - cur["codec"]),
               "bytes_dense": dense, "collectives": int(totals.collectives - prev.collectives)}
        cur.update(totals=totals, kept=self.kept, elements=self.elements, dense=self.dense,
                   codec=self.codec)
        return out


def monitor_stats(monitor: NetworkMonitor, cur: dict[str, Any]) -> dict[str, Any]:
    """The monitor's view (``est_*``), for the testbed's sensing validation."""
    est = monitor.estimate()
    if est is None:
        return {}
    out: dict[str, Any] = {"est_min_rtt_s": float(est.min_rtt), "est_rate_age": int(est.rate_age)}
    if est.max_rate is not None:
        out.update(est_rate_mbit=float(est.max_rate) * 8e-6, est_bdp_bytes=float(est.bdp),
                   est_queue_delay_s=float(est.queue_delay))
    last = monitor.last_rate_sample
    if est.rate_samples > cur["rate_seen"] and last is not None:
        out.update(est_sample_bytes=float(last[0]), est_sample_s=float(last[1]),
                   est_sample_rtt_s=float(last[2]),
                   est_sample_sustained=int(monitor.last_rate_sustained))
    cur["rate_seen"] = est.rate_samples
    return out


def tcp_stats(tcp: TcpInfoSensor) -> dict[str, Any]:
    """The kernel's view (``TCP_INFO`` of the peer sockets: ``tcp_*``)."""
    view = tcp.read()
    if view is None:
        return {}
    out: dict[str, Any] = {"tcp_delivery_rate_mbit": view.delivery_rate_Bps * 8e-6,
                           "tcp_app_limited": int(view.app_limited), "tcp_sockets": view.sockets,
                           "tcp_retrans": view.retrans}
    if view.min_rtt_s is not None:
        out["tcp_min_rtt_s"] = view.min_rtt_s
    return out


class StepTimer:
    """What a step measured, from the recorder's totals at its bucket-0 calls (the hooks'
    module docstring): period, comm, exposed comm (last completion minus last launch),
    compute (period less exposed), codec, bytes, collectives, first to last launch."""

    def __init__(self, totals: CommTotals) -> None:
        self.start: float | None = None
        self.first_launch: float | None = None
        self.at_start = totals
        self.codec_at_start = 0.0

    def open(self, now: float, totals: CommTotals, codec_total: float) -> Measured | None:
        """Bucket 0 opens a step: the step that just ended (None before the first)."""
        measured = None if self.start is None else self._measured(now, totals, codec_total)
        self.start, self.first_launch = now, None
        self.at_start, self.codec_at_start = totals, codec_total
        return measured

    def _measured(self, now: float, totals: CommTotals, codec_total: float) -> Measured:
        prev = self.at_start
        period = now - self.start  # type: ignore[operator]
        collectives = totals.collectives - prev.collectives
        # Every collective of the step has completed (DDP waited for them): what the step
        # waited for after its last launch is the exposed communication.
        exposed = max(0.0, totals.last_done - totals.last_launch) if collectives else 0.0
        overlap = (max(0.0, totals.last_launch - self.first_launch)
                   if self.first_launch is not None else 0.0)
        return Measured(comm_s=totals.busy_s - prev.busy_s, exposed_s=exposed,
                        compute_s=max(period - exposed, 1e-6),
                        codec_s=codec_total - self.codec_at_start,
                        bytes_sent=totals.bytes_sent - prev.bytes_sent,
                        collectives=collectives, overlap_s=overlap)


class _UserCode:
    """Marks the state as inside user code (``NetSenseState.user_code``)."""

    def __init__(self, state: NetSenseState, what: str) -> None:
        self.state, self.what = state, what

    def __enter__(self) -> None:
        self.state._user_code = (self.what, _time.monotonic())

    def __exit__(self, *exc: Any) -> None:
        self.state._user_code = None


class NetSenseState:
    """State of one registered hook (one per DDP model and rank).

    Parts: ``options`` (:class:`HookOptions`, frozen); ``codecs`` (:class:`Codecs`; a fixed
    method's ``compressor``); ``stats`` (:class:`StepStatistics`); ``timer``
    (:class:`StepTimer`) and ``loop`` (:class:`~netsenseml.loop.StepLoop`, the adaptive
    methods only: ``policy``, ``decision``, ``calibration``); ``feedback`` (error feedback,
    :class:`~netsenseml.memory.ErrorFeedback`, whole in ``netsenseml.memory``: its
    ``memory`` is ``None`` when off or when the method's compressor is not ``lossy``; keyed
    by DDP bucket index and re-laid-out when DDP rebuilds its buckets);
    ``recorder`` (bytes and busy time of this rank's collectives) feeding ``monitor`` (the
    network monitor; ``netsenseml-paper``: its rule takes the samples instead); ``pacer``
    (the emulated accelerator's, or None); ``job`` (the own job's recorder under the
    testbed, or None); ``norms`` (:class:`~netsenseml.gradnorms.GradNorms`: the accumulated
    local gradient, for a policy with ``grad_norm_every``, or None); ``hook``, ``hook_state`` (a ``hook`` method's function and the state
    it is called with: a :class:`~netsenseml.counted_group.CountedGroup`, or an object
    holding one); ``step`` (bucket-0 calls).

    Step statistics (:meth:`pop_step_stats`) cover everything since the previous call:

    * ``bytes_sent`` -- bytes of the input tensors this rank handed to torch.distributed
      (allreduce tensors, all-gather inputs including size headers and padding),
    * ``comm_s`` -- wall-clock seconds during which at least one of this hook's collectives
      was in flight (union over collectives of launch -> completion callback; buckets that
      overlap are not counted twice),
    * ``kept_ratio`` -- gradient elements transmitted / gradient elements (1.0 for dense
      methods); for ``hook`` methods (PowerSGD, plug-in hooks), whose elements are not
      known, ``bytes_sent / bytes_dense``,
    * ``level`` -- the method's level label (``netsenseml.methods.level_order()``: "none",
      "fp16", "bf16", "int8", "topk", "randomk", "dgc", "powersgd"; a plug-in's name),
    * ``codec_s`` -- seconds spent compressing and decompressing,
    * ``bytes_dense`` -- bytes an fp32 allreduce of the same buckets would have handed over,
    * ``ratio`` -- the top-k kept fraction in use (1.0 otherwise),
    * ``collectives`` -- collectives this hook issued (each costs headers and acks on the
      wire however small; the testbed's byte-conservation band needs the count),
    * ``est_*`` -- the network monitor's estimate at the pop, once it has a sample:
      ``est_min_rtt_s``, ``est_rate_age`` (samples since its latest rate sample) and, once
      a rate was sensed, ``est_rate_mbit`` (windowed delivery rate, fp32-allreduce-
      equivalent payload, Mbit/s),
      ``est_bdp_bytes``, ``est_queue_delay_s`` (:mod:`netsenseml.monitor`); on a step that
      gave the monitor a rate sample, the newest one: ``est_sample_bytes``, ``est_sample_s``
      and the min RTT it was taken against, ``est_sample_rtt_s`` (to re-derive the estimate
      offline),
    * ``tcp_*`` -- the kernel's view of this rank's peer sockets (``TCP_INFO``):
      ``tcp_delivery_rate_mbit``, ``tcp_app_limited``, ``tcp_min_rtt_s``, ``tcp_sockets``,
      ``tcp_retrans`` (segments retransmitted since the previous step),
    * ``pace_*`` -- with an emulated accelerator (``pacer``): ``pace_wait_s`` (held back to
      the profile), ``pace_late_s`` (the latest part's lateness), ``pace_overrun`` (1 when
      the host's real work did not fit the profiled step; ``netsenseml.accelerator``),
    * ``model_*`` -- ``netsenseml`` only: the policy's step model behind its decision
      (:meth:`NetSensePolicy.stats`: fixed comm s, bandwidth share Mbit/s, compute s, codec
      s, predicted step s of the decision and of ``none``) and ``probe`` (1 on a probe step).

    Units are the last word of a name (``_s``, ``_bytes``, ``_mbit``; ``workloads.records``).
    """

    def __init__(self, method: MethodSpec, process_group: Any = None,
                 options: HookOptions | None = None, *, policy: AdaptivePolicy | None = None,
                 compressor: compress.Compressor | None = None, level: str | None = None,
                 pacer: accelerator.Pacer | None = None) -> None:
        self.method, self.process_group = method, process_group
        self.options = opts = options or HookOptions()
        self.world_size = dist.get_world_size(process_group)
        self.pacer = pacer
        self.monitor = NetworkMonitor(opts.monitor_rate_window, min_rate_bytes=opts.monitor_min_rate_bytes,
                                      rate_filter=opts.monitor_rate_filter)
        self.loop = None if policy is None else StepLoop(policy, self.monitor, opts.rtt_probe_every)
        #: the accumulated local gradient, for a policy that reads its norms (Accordion)
        every = grad_norm_every(policy)
        self.norms: GradNorms | None = GradNorms(every) if every else None
        sink = self.monitor if self.loop is None else self.loop.sample_sink
        self.recorder = CommRecorder(sink, service_time=sink is self.monitor)  # type: ignore[arg-type]
        port = os.environ.get("MASTER_PORT", "")
        self.tcp = TcpInfoSensor(exclude_port=int(port) if port.isdigit() else None)
        self.calibration: Calibration | None = None
        self.codecs = Codecs(compressor, policy, opts.topk_method, opts.payload)
        self.hook: Callable[[Any, dist.GradBucket], torch.futures.Future] | None = None
        self.hook_state: Any = None
        self.step = 0
        # Error feedback (netsenseml.memory): follows the compressor's declared ``lossy``
        # and ``memory``; an adaptive policy that drains (``drains_residual``) bounds it.
        self.memory: ResidualMemory | None = memory.for_method(
            opts.error_feedback, compressor is not None and compressor.lossy, policy is not None,
            opts.memory_kind if compressor is not None else None, opts.dgc_momentum)
        self.feedback = memory.ErrorFeedback(
            self.memory, opts.residual_drain if policy is not None and policy.drains_residual else None)
        self._fixed = Decision(level or method.level, method.ratio or 1.0)
        self.previous_future: torch.futures.Future | None = None
        self.stats = StepStatistics(self.recorder)
        self.timer = StepTimer(self.recorder.totals())
        self._wire: list[float] | None = None  # this rank's observation of the last step
        #: the own job's recorder (``netsenseml.job``), when the testbed asked for records
        self.job: Any = None
        #: user code the hook is inside now: (what, time.monotonic() it was entered)
        self._user_code: tuple[str, float] | None = None

    # ----------------------------------------------------------------- parts, by name
    @property
    def policy(self) -> AdaptivePolicy | None:
        return None if self.loop is None else self.loop.policy

    @property
    def decision(self) -> Decision:
        """Level and kept fraction the current step uses."""
        return self._fixed if self.loop is None else self.loop.decision

    @decision.setter
    def decision(self, value: Decision) -> None:
        if self.loop is None:
            self._fixed = value
        else:
            self.loop.decision = value

    @property
    def compressor(self) -> compress.Compressor | None:
        """A ``compressor`` method's compressor."""
        return self.codecs.fixed

    @property
    def error_feedback(self) -> bool:
        return self.options.error_feedback

    @property
    def powersgd(self) -> Any:
        """torch's ``PowerSGDState`` (``powersgd`` only, else None)."""
        own = self.method.info is not None and self.method.info.state is not None
        return self.hook_state if own else None

    def in_startup(self) -> bool:
        """The step just ended is one of DDP's start-up steps (:data:`DDP_STARTUP_STEPS`).
        Throughput leaves them out where enough steps remain (``testbed.common.metrics``)."""
        return self.step <= DDP_STARTUP_STEPS

    def in_warmup(self) -> bool:
        """The step just ended ran the method's declared warm-up, not its steady state:
        PowerSGD's dense allreduces before ``start_powerSGD_iter`` (its ``iter`` counts the
        steps ended). Throughput leaves such steps out (``testbed.common.metrics``)."""
        ps = self.powersgd
        return ps is not None and ps.iter <= ps.start_powerSGD_iter

    # ----------------------------------------------------------------- statistics
    def pop_step_stats(self) -> dict[str, Any]:
        """Returns and resets this rank's statistics since the last call (see class doc).

        In an own job under the testbed (``netsenseml.job``) the testbed's records read the
        same statistics through a cursor of their own, so a job that pops them too takes
        nothing from the records; the pacer's (``pace_*``) then go to the records only.
        """
        return self._pop(self.stats.user, pacer=self.job is None)

    def pop_job_stats(self) -> dict[str, Any]:
        """The testbed's records' statistics since their last step (``netsenseml.job``)."""
        return self._pop(self.stats.job, pacer=True)

    def _pop(self, cur: dict[str, Any], pacer: bool) -> dict[str, Any]:
        totals = self.recorder.totals()
        with self.stats.lock:
            out = self.stats.take(cur, totals, self.hook is not None, self.decision)
            if self.in_warmup():
                out["warmup"] = 1
            if self.in_startup():
                out["startup"] = 1
            out.update(monitor_stats(self.monitor, cur))
            out.update(tcp_stats(self.tcp))
            if self.policy is not None:
                out.update(self.policy.step_stats(self.decision))
            if self.pacer is not None and pacer:
                out.update(self.pacer.pop())
        return out

    def count(self, kept: int, elements: int, dense_bytes: int, codec_s: float) -> None:
        self.stats.count(kept, elements, dense_bytes, codec_s)

    # ----------------------------------------------------------------- user code
    def user_code(self, what: str) -> _UserCode:
        """``with state.user_code("..."):`` around a plug-in's code: a worker's watchdog
        can then say that user code did not return (:meth:`user_code_stuck`), not that the
        network stalled."""
        return _UserCode(self, what)

    def user_code_stuck(self, min_s: float = 0.0) -> str | None:
        """What user code the hook has been inside for at least ``min_s`` real seconds, or
        None: e.g. ``the compressor plug-in 'my.mod:Codec' compress() (12 s)``."""
        now = _time.monotonic()
        inside = self._user_code
        if inside is None or now - inside[1] < min_s:
            return None
        return f"{inside[0]}, entered {now - inside[1]:.0f} s ago and not returned"

    # ----------------------------------------------------------------- the step loop
    def begin_bucket(self, bucket: dist.GradBucket) -> bool:
        """Called first by every hook; returns True when ``bucket`` opens a new step (the
        hooks' module docstring): the own job's step boundary, the pacer's own step, this
        rank's observation of the step that ended, the loop's next decision."""
        now = clock.now()
        if bucket.index() == 1:  # bucket 0's collective was launched inside its hook call
            self.timer.first_launch = self.recorder.totals().last_launch
        if bucket.index() != 0:
            if self.norms is not None:
                self.norms.add(bucket)
            return False
        if self.job is not None:  # an own job: bucket 0 is its step boundary
            self.job.boundary(now)
        if self.pacer is not None and self.pacer.own_job:
            done = self.recorder.totals().last_done
            self.pacer.start_own_step(done if self.step > 0 and done > 0 else None)
        measured = self.timer.open(now, self.recorder.totals(), self.stats.codec_total())
        if self.loop is not None:
            if measured is not None:
                if self.norms is not None:  # the step that ended may close a window
                    measured = dataclasses.replace(measured, grad_norms=self.norms.end_step())
                self._wire = to_wire(self.loop.observation(measured))
            self.loop.begin_step()
        if self.norms is not None:
            self.norms.add(bucket)
        self.step += 1
        return True

    def extras_for(self, first: bool) -> torch.Tensor | None:
        """The observation to piggy-back on this bucket (adaptive methods, bucket 0 only;
        zeros before a step completed: not valid)."""
        if self.loop is None or not first:
            return None
        return torch.tensor(self._wire if self._wire is not None else [0.0] * N_EXTRAS,
                            dtype=torch.float32)

    def on_extras(self, mean: torch.Tensor) -> None:
        """The mean over ranks of the piggy-backed observations arrived: the loop decides."""
        if self.loop is None:
            return
        obs = from_wire([float(x) for x in mean], self.loop.observed)
        if obs is not None:
            self.loop.deliver(obs)

    # ----------------------------------------------------------------- residuals
    def bucket_feedback(self, bucket: dist.GradBucket, codec: Any) -> memory.BucketFeedback:
        """Error feedback of ``bucket`` compressed by ``codec`` (netsenseml.memory); when DDP
        rebuilds its buckets the residuals follow the parameters."""
        return self.feedback.bucket(bucket, codec)

    def residual_by_param(self) -> dict[torch.Tensor, torch.Tensor]:
        """The current error-feedback residual of each parameter, shaped like it."""
        return self.feedback.by_param()
