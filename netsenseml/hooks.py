"""DDP communication hooks: fixed compression methods and the NetSenseML adaptive method.

Usage, in any PyTorch DDP job (gloo or NCCL, with or without the testbed)::

    from netsenseml import hooks
    state = hooks.register(ddp_model, "netsenseml")   # or "allreduce", "fp16", "topk:0.01", ...
    state = hooks.register(ddp_model, "my_pkg.codecs:SignSGD")   # a plug-in (PLUGINS.md)
    ...
    optimizer.step()
    stats = state.pop_step_stats()                    # bytes_sent, comm_s, kept_ratio, level, ...
    hooks.report(samples=len(x), loss=loss.item())   # what only the job knows (testbed records)

``hooks.register(ddp_model)`` with no method takes the run's method when the testbed started
the job (``netsense run`` of a scenario whose workload is a command; ``netsenseml.job``), and
``allreduce`` otherwise; under the testbed the hook also writes the run's per-step records.

The algorithm, once
-------------------
DDP hands each gradient bucket (a flat fp32 buffer of local, not yet averaged, gradients)
to the hook in bucket-index order; the hook returns a future of the averaged buffer. For a
bucket the hook

1. adds the error-feedback residual of that bucket (lossy methods; ``netsenseml.memory``),
2. compresses the result (``netsenseml.compress``) and keeps ``compensated - sent`` as the
   new residual,
3. communicates (``netsenseml.comm``): summable payloads (fp32, fp16/bf16, random-k values
   under a shared seed) are allreduced; per-rank payloads (int8 with its own scale, top-k
   values + indices) are all-gathered, variable sizes handled without truncation,
4. decodes, sums over ranks and divides by the world size (the mean, like DDP's default),
5. counts the bytes of every tensor handed to torch.distributed and the time collectives
   are in flight, and gives each collective to the network monitor as a sample
   (``netsenseml.sense``).

Error feedback across level switches (``netsenseml``): a dense level (none, fp16/bf16,
int8) adds the residual that sparse steps left at a bounded rate (at most
``residual_drain`` x the gradient's norm per step; the rest is carried), so a switch from
top-k to fp16 does not send many steps' worth of withheld gradient at once, and the cast
levels keep their own rounding error as residual.

``netsenseml`` and ``netsenseml-paper`` (the adaptive methods) add a step loop around this.
Bucket 0 opens a step. At that moment each rank knows the previous step completely: its
period (time between the two bucket-0 calls), its comm time, its exposed comm time (last
collective completion minus the last collective's launch, i.e. what the step waited for
after its last bucket was compressed) and so its compute time (period minus exposed comm),
its codec time, its bytes and collectives, the time from its first to its last launch
(where communication can hide behind the backward pass), and the prototype rule's verdict
counts. These float32 values (:data:`EXTRAS`, with the monitor's rate, min RTT and queueing delay)
ride on bucket 0's own collective
(appended to the allreduced buffer pre-divided by the world size, or packed into the
gathered bytes), so
every rank receives the same **mean over ranks** without an extra round trip. When that
collective completes, the policy (``netsenseml.policy`` or ``netsenseml.paper_rule``) turns
the mean into the decision (level, kept fraction) that the *next* step uses for all its
buckets: decisions are identical on all ranks and never change inside a step. (For
fp16/bf16 levels the piggy-backed values travel in that dtype, in ms and MB units; their
precision then is that of the dtype, still identical on all ranks.)

``netsenseml`` decides from the first step: :func:`register` runs a probe once, before
training (each level's codec time on a gradient-sized tensor, three one-element allreduces
for the latency, the fastest of three ``probe_bytes`` allreduces for the bandwidth; one
more allreduce makes every rank use the mean), and the policy's first decision comes from
it. Registering ``netsenseml`` is therefore collective: every rank must call
:func:`register`, as every rank constructs DDP.

Methods come from the registry ``netsenseml.methods`` (one grammar for the hooks, the
compressors, the worker and the testbed). A ``compressor`` method runs steps 1-5 above
with the compressor's declared properties (``lossy`` -> error feedback, ``reduction``,
``dense``, ``max_nbytes``; ``netsenseml.compress.base``), whether built in or a user's class
named by import path.

A ``hook`` method is a function with DDP's comm-hook signature: ``powersgd:RANK`` (torch's
own ``powerSGD_hook`` on a ``PowerSGDState``) or any ``package.module:function``, e.g.
torch's ``fp16_compress_hook``. :func:`raw_hook` calls it with a
:class:`~netsenseml.counted_group.CountedGroup` (the state PowerSGD's state holds, or the
state itself for a plain hook): every collective the hook issues on it, from any thread,
is counted (bytes, busy time, monitor samples), not estimated from the hook's word. A
bucket starts only after the previous bucket finished (``serialize_buckets``, on by
default): hooks like PowerSGD launch collectives from completion callbacks, and with
several buckets in flight gloo could see them in a different order on different ranks.

World size 1 works (collectives of one rank): a single-process DDP job runs unchanged.
"""

import os
import threading
import time as _time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from netsenseml import accelerator, clock, compress, convergence, job, methods
from netsenseml.comm import CommRecorder, CommTotals, allgather_bytes, allreduce, pack, unpack
from netsenseml.compress.base import Payload
from netsenseml.counted_group import counted_group
from netsenseml.job import report as report  # re-exported: hooks.report(samples=, loss=, ...)
from netsenseml.lifecycle import clean_exit as clean_exit  # re-exported: hooks.clean_exit()
from netsenseml.lifecycle import shutdown as shutdown  # re-exported: hooks.shutdown()
from netsenseml.memory import MomentumCorrectionMemory, ResidualMemory
from netsenseml.methods import METHOD_FORMS as METHOD_FORMS  # re-exported: the accepted forms
from netsenseml.methods import MethodSpec
from netsenseml.paper_rule import PaperRule
from netsenseml.policy import Calibration, Decision, NetSensePolicy, Observation
from netsenseml.sense import RTT_PROBE_EVERY, NetworkMonitor, TcpInfoSensor, rtt_probe_due

# The per-step values piggy-backed on bucket 0 (units chosen to suit fp16 transport).
EXTRAS = ("valid", "comm_ms", "exposed_ms", "compute_ms", "codec_ms", "bytes_MB",
          "collectives", "overlap_ms", "congested", "samples", "has_rate", "rate_MBps", "rtt_ms", "queue_ms")
N_EXTRAS = len(EXTRAS)
_COMMON_OPTIONS = ("monitor_rate_window", "monitor_rate_filter", "monitor_min_rate_bytes",
                   "rtt_probe_every", "pacer",
                   "residual_drain", "seed", "dgc_momentum", "topk_method", "serialize_buckets")
_PROBE_OPTIONS = ("probe_bytes", "probe_ratio")


def parse_method(spec: str) -> MethodSpec:
    """Validates a method string (grammar of ``netsenseml.methods``; plug-ins not imported).

    A ValueError is one line naming the spec and :data:`METHOD_FORMS`.
    """
    return methods.parse(spec)


class _UserCode:
    """Marks the state as inside user code (``NetSenseState.user_code``)."""

    def __init__(self, state: Any, what: str) -> None:
        self.state, self.what = state, what

    def __enter__(self) -> None:
        self.state._user_code = (self.what, _time.monotonic())

    def __exit__(self, *exc: Any) -> None:
        self.state._user_code = None


class NetSenseState:
    """State of one registered hook (one per DDP model and rank).

    Attributes:
        method: the parsed method.
        process_group: the group collectives run on (``None``: the default group).
        world_size: size of that group.
        memory: error-feedback memory (``None`` when off or when the method's compressor
            is not ``lossy``); residuals are keyed by DDP bucket index, re-laid-out when
            DDP rebuilds buckets.
        compressor: the compressor of a ``compressor`` method.
        monitor: the network monitor, fed one sample per collective of this rank
            (``netsenseml-paper``: its rule takes the samples instead).
        recorder: bytes / busy-time accounting of this rank's collectives.
        policy: the adaptive policy (``netsenseml``: :class:`NetSensePolicy`;
            ``netsenseml-paper``: :class:`PaperRule`, which also receives every collective's
            sample in place of the monitor).
        calibration: the registration probe's agreed result (``netsenseml`` only).
        decision: level and kept fraction used by the current step.
        hook, hook_state: a ``hook`` method's function and the state it is called with
            (a :class:`~netsenseml.counted_group.CountedGroup`, or an object holding one).
        powersgd: torch's ``PowerSGDState`` (``powersgd`` only).
        step: number of steps started (bucket-0 calls).
        pacer: the emulated accelerator's pacer (``netsenseml.accelerator``), or None:
            releases each bucket at its profiled time and holds the codec work to its
            profiled cost.

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
      ``est_bdp_bytes``, ``est_queue_delay_s`` (:mod:`netsenseml.sense`); on a step that
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

    def __init__(
        self,
        method: MethodSpec,
        process_group: Any = None,
        error_feedback: bool = True,
        monitor_rate_window: int = 8,
        monitor_rate_filter: str = "max",
        monitor_min_rate_bytes: float = 512 * 1024,
        rtt_probe_every: int = RTT_PROBE_EVERY,
        residual_drain: float = 1.0,
        topk_method: str = "auto",
        dgc_momentum: float = 0.9,
        seed: int = 0,
        policy: NetSensePolicy | PaperRule | None = None,
        compressor: compress.Compressor | None = None,
        memory_kind: str = "residual",
        level: str | None = None,
        serialize_buckets: bool = True,
        pacer: accelerator.Pacer | None = None,
    ) -> None:
        self.method = method
        self.pacer = pacer
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.error_feedback = error_feedback
        if rtt_probe_every < 1 or residual_drain <= 0:
            raise ValueError(f"need rtt_probe_every >= 1 and residual_drain > 0, got "
                             f"{rtt_probe_every}, {residual_drain}")
        self.monitor = NetworkMonitor(monitor_rate_window, min_rate_bytes=monitor_min_rate_bytes,
                                      rate_filter=monitor_rate_filter)
        paper = isinstance(policy, PaperRule)
        self.recorder = CommRecorder(policy if paper else self.monitor, service_time=not paper)
        port = os.environ.get("MASTER_PORT", "")
        self.tcp = TcpInfoSensor(exclude_port=int(port) if port.isdigit() else None)
        self.rtt_probe_every = rtt_probe_every
        self.residual_drain = residual_drain
        self.policy = policy
        self.calibration: Calibration | None = None
        self.compressor = compressor
        self.hook: Callable[[Any, dist.GradBucket], torch.futures.Future] | None = None
        self.hook_state: Any = None
        self.serialize_buckets = serialize_buckets
        self.seed = seed
        self.step = 0
        self.memory: ResidualMemory | None = None
        # Error feedback follows the compressor's declared ``lossy``; the adaptive methods
        # may pick lossy levels at any step, so they always keep a residual.
        if error_feedback and ((compressor is not None and compressor.lossy) or policy is not None):
            kind = memory_kind if compressor is not None else "residual"
            self.memory = MomentumCorrectionMemory(dgc_momentum) if kind == "momentum" else ResidualMemory()
        self.compressors: dict[str, compress.Compressor] = {}
        if policy is not None:
            for info in methods.ladder():
                made = methods.resolve(info.name if info.arg is None else f"{info.name}:1").build()
                self.compressors[info.label] = made
            # netsenseml: the configured top-k variant; netsenseml-paper: the prototype's
            # exact torch.topk.
            exact = isinstance(policy, PaperRule)
            self.compressors["topk"] = compress.TopKCompressor(
                0.1, method="exact" if exact else topk_method)
        self.decision = (policy.decision if policy is not None
                         else Decision(level or method.level, method.ratio or 1.0))
        self._pending: Decision | None = None
        self.observed: Decision = self.decision  # the decision of the step being reported
        self.previous_future: torch.futures.Future | None = None
        self._lock = threading.Lock()
        # Per-step bookkeeping of the previous step (for the policy's observation).
        self._step_start: float | None = None
        self._first_launch: float | None = None
        self._totals_at_step_start = self.recorder.totals()
        self._codec_total = 0.0  # cumulative, for per-step differences
        self._codec_at_step_start = 0.0
        self._prev_obs: torch.Tensor | None = None
        # Cumulative counts; each reader of step statistics keeps its own cursor into them
        # (the job's own pop_step_stats and, in an own job, the testbed's records).
        self._kept_total = 0
        self._elements_total = 0
        self._dense_total = 0
        self._user_cursor = self._cursor()
        self._job_cursor = self._cursor()
        #: the own job's recorder (``netsenseml.job``), when the testbed asked for records
        self.job: Any = None
        #: user code the hook is inside now: (what, time.monotonic() it was entered)
        self._user_code: tuple[str, float] | None = None
        # Bucket layouts, to carry residuals over DDP's bucket rebuild.
        self._layouts: dict[int, tuple[int, ...]] = {}
        self._params: dict[int, torch.Tensor] = {}
        self._pool: dict[tuple[str, int], torch.Tensor] = {}

    @property
    def powersgd(self) -> Any:
        """torch's ``PowerSGDState`` (``powersgd`` only, else None)."""
        return self.hook_state if self.method.name == "powersgd" else None

    # ----------------------------------------------------------------- statistics
    def _cursor(self) -> dict[str, Any]:
        return {"totals": self.recorder.totals(), "kept": self._kept_total,
                "elements": self._elements_total, "dense": self._dense_total,
                "codec": self._codec_total, "rate_seen": 0}

    def pop_step_stats(self) -> dict[str, Any]:
        """Returns and resets this rank's statistics since the last call (see class doc).

        In an own job under the testbed (``netsenseml.job``) the testbed's records read the
        same statistics through a cursor of their own, so a job that pops them too takes
        nothing from the records; the pacer's (``pace_*``) then go to the records only.
        """
        return self._pop(self._user_cursor, pacer=self.job is None)

    def pop_job_stats(self) -> dict[str, Any]:
        """The testbed's records' statistics since their last step (``netsenseml.job``)."""
        return self._pop(self._job_cursor, pacer=True)

    def _pop(self, cur: dict[str, Any], pacer: bool) -> dict[str, Any]:
        totals = self.recorder.totals()
        with self._lock:
            prev = cur["totals"]
            sent = int(totals.bytes_sent - prev.bytes_sent)
            dense = int(self._dense_total - cur["dense"])
            kept_n = self._kept_total - cur["kept"]
            elements = self._elements_total - cur["elements"]
            if self.hook is not None:  # a raw hook: only its bytes are known
                kept = sent / dense if dense else 1.0
            else:
                kept = kept_n / elements if elements else 1.0
            out = {
                "bytes_sent": sent,
                "comm_s": float(totals.busy_s - prev.busy_s),
                "kept_ratio": float(kept),
                "level": self.decision.level,
                "ratio": float(self.decision.ratio),
                "codec_s": float(self._codec_total - cur["codec"]),
                "bytes_dense": dense,
                "collectives": int(totals.collectives - prev.collectives),
            }
            est = self.monitor.estimate()
            if est is not None:  # the monitor's view, for the testbed's sensing validation
                out.update(est_min_rtt_s=float(est.min_rtt), est_rate_age=int(est.rate_age))
                if est.max_rate is not None:
                    out.update(est_rate_mbit=float(est.max_rate) * 8e-6, est_bdp_bytes=float(est.bdp),
                               est_queue_delay_s=float(est.queue_delay))
                last = self.monitor.last_rate_sample
                if est.rate_samples > cur["rate_seen"] and last is not None:
                    out.update(est_sample_bytes=float(last[0]), est_sample_s=float(last[1]),
                               est_sample_rtt_s=float(last[2]))
                cur["rate_seen"] = est.rate_samples
            tcp = self.tcp.read()
            if tcp is not None:  # the kernel's view (TCP_INFO of the peer sockets)
                out.update(tcp_delivery_rate_mbit=tcp.delivery_rate_Bps * 8e-6,
                           tcp_app_limited=int(tcp.app_limited), tcp_sockets=tcp.sockets,
                           tcp_retrans=tcp.retrans)
                if tcp.min_rtt_s is not None:
                    out["tcp_min_rtt_s"] = tcp.min_rtt_s
            if isinstance(self.policy, NetSensePolicy) and self.policy.calibration is not None:
                out.update(self.policy.stats())
                out["probe"] = int(self.decision.probe)
            if self.pacer is not None and pacer:
                out.update(self.pacer.pop())
            cur.update(totals=totals, kept=self._kept_total, elements=self._elements_total,
                       dense=self._dense_total, codec=self._codec_total)
        return out

    def count(self, kept: int, elements: int, dense_bytes: int, codec_s: float) -> None:
        with self._lock:
            self._kept_total += kept
            self._elements_total += elements
            self._dense_total += dense_bytes
            self._codec_total += codec_s

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

    # ----------------------------------------------------------------- step loop
    def begin_bucket(self, bucket: dist.GradBucket) -> bool:
        """Called first by every hook; returns True when ``bucket`` opens a new step."""
        now = clock.now()
        first = bucket.index() == 0
        if first and self.job is not None:  # an own job: bucket 0 is its step boundary
            self.job.boundary(now)
        if first and self.pacer is not None and self.pacer.own_job:
            done = self.recorder.totals().last_done
            self.pacer.start_own_step(done if self.step > 0 and done > 0 else None)
        if bucket.index() == 1:  # bucket 0's collective was launched inside its hook call
            self._first_launch = self.recorder.totals().last_launch
        if first:
            totals = self.recorder.totals()
            with self._lock:
                codec_total = self._codec_total
            if self._step_start is not None and self.policy is not None:
                self._prev_obs = self._observation(now, totals, codec_total)
            self._step_start = now
            self._first_launch = None
            self._totals_at_step_start = totals
            self._codec_at_step_start = codec_total
            self.observed = self.decision
            if self._pending is not None:
                self.decision = self._pending
                self._pending = None
            self.step += 1
        return first

    def _observation(self, now: float, totals: CommTotals, codec_total: float) -> torch.Tensor:
        """This rank's values of the step that just ended (:data:`EXTRAS`)."""
        prev = self._totals_at_step_start
        period = now - self._step_start  # type: ignore[operator]
        comm = totals.busy_s - prev.busy_s
        collectives = totals.collectives - prev.collectives
        # Every collective of the step has completed (DDP waited for them): what the step
        # waited for after its last launch is the exposed communication.
        exposed = max(0.0, totals.last_done - totals.last_launch) if collectives else 0.0
        compute = max(period - exposed, 1e-6)
        overlap = max(0.0, totals.last_launch - self._first_launch) if self._first_launch is not None else 0.0
        congested, samples = self.policy.take_counts() if isinstance(self.policy, PaperRule) else (0, 0)
        est = self.monitor.estimate()
        rate = est.max_rate if est is not None and est.max_rate is not None else 0.0
        rtt = est.min_rtt if est is not None else 0.0
        queue = est.queue_delay if est is not None else 0.0
        return torch.tensor(
            [1.0, comm * 1e3, exposed * 1e3, compute * 1e3, (codec_total - self._codec_at_step_start) * 1e3,
             (totals.bytes_sent - prev.bytes_sent) / 1e6, collectives, overlap * 1e3, congested, samples,
             float(rate > 0), rate / 1e6, rtt * 1e3, queue * 1e3],
            dtype=torch.float32,
        )

    def on_extras(self, mean: torch.Tensor) -> None:
        """Feeds the policy with the mean over ranks of the piggy-backed observation."""
        if self.policy is None:
            return
        v = dict(zip(EXTRAS, (float(x) for x in mean), strict=True))
        if v["valid"] < 0.999:  # some rank had no complete previous step yet
            return
        obs = Observation(
            decision=self.observed,
            comm_s=v["comm_ms"] * 1e-3,
            exposed_s=v["exposed_ms"] * 1e-3,
            compute_s=v["compute_ms"] * 1e-3,
            codec_s=v["codec_ms"] * 1e-3,
            bytes_sent=v["bytes_MB"] * 1e6,
            collectives=v["collectives"],
            overlap_s=v["overlap_ms"] * 1e-3,
            congested=v["congested"],
            samples=v["samples"],
            # a rate only where every rank sensed one (the mean of a rate and a 0 is none)
            rate_Bps=v["rate_MBps"] * 1e6 if v["has_rate"] >= 0.999 else 0.0,
            min_rtt_s=v["rtt_ms"] * 1e-3,
            queue_s=v["queue_ms"] * 1e-3,
        )
        self._pending = self.policy.observe(obs)
        if getattr(self.policy, "new_regime", False):
            # Every rank restarts its rate window at the same step: the path changed.
            self.monitor.restart_rate()

    def extras_for(self, first: bool) -> torch.Tensor | None:
        """The observation to piggy-back on this bucket (adaptive methods, bucket 0 only)."""
        if self.policy is None or not first:
            return None
        if self._prev_obs is None:
            return torch.zeros(N_EXTRAS, dtype=torch.float32)
        return self._prev_obs

    # ----------------------------------------------------------------- residuals
    def memory_key(self, bucket: dist.GradBucket) -> int:
        """Bucket index; when DDP rebuilds its buckets the residuals follow the parameters."""
        idx = bucket.index()
        params = bucket.parameters()
        layout = tuple(id(p) for p in params)
        if self._layouts.get(idx) != layout:
            if idx in self._layouts and self.memory is not None:
                self._dissolve()  # DDP rebuilt its buckets: residuals back to parameters
            self._layouts[idx] = layout
            for p in params:
                self._params[id(p)] = p
            self._assemble(idx, layout)
        return idx

    def _stores(self) -> dict[str, dict]:
        stores: dict[str, dict] = {}
        if self.memory is not None:
            stores["residual"] = self.memory.residuals
            if isinstance(self.memory, MomentumCorrectionMemory):
                stores["velocity"] = self.memory.velocities
        return stores

    def _dissolve(self) -> None:
        for name, store in self._stores().items():
            for idx, flat in list(store.items()):
                for pid, piece in self._split(idx, flat):
                    self._pool[(name, pid)] = piece
            store.clear()
        self._layouts.clear()

    def _split(self, idx: int, flat: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
        out, off = [], 0
        for pid in self._layouts.get(idx, ()):
            n = self._params[pid].numel()
            out.append((pid, flat[off : off + n]))
            off += n
        return out

    def _assemble(self, idx: int, layout: tuple[int, ...]) -> None:
        for name, store in self._stores().items():
            if not any((name, pid) in self._pool for pid in layout):
                continue
            pieces = [
                self._pool.pop((name, pid), None)
                if (name, pid) in self._pool
                else torch.zeros_like(self._params[pid]).reshape(-1)
                for pid in layout
            ]
            store[idx] = torch.cat([p.reshape(-1) for p in pieces])

    def residual_by_param(self) -> dict[torch.Tensor, torch.Tensor]:
        """The current error-feedback residual of each parameter, shaped like it."""
        if self.memory is None:
            return {}
        out = {}
        for (name, pid), piece in self._pool.items():
            if name == "residual":
                out[self._params[pid]] = piece.view_as(self._params[pid])
        for idx, flat in self.memory.residuals.items():
            for pid, piece in self._split(idx, flat):
                p = self._params[pid]
                out[p] = piece.view_as(p)
        return out


# --------------------------------------------------------------------- the hooks
def _reduce_bucket(
    state: NetSenseState,
    bucket: dist.GradBucket,
    compressor: compress.Compressor,
    extras: torch.Tensor | None,
    seed: int | None = None,
) -> torch.futures.Future[torch.Tensor]:
    """Steps 1-5 of the module docstring for one bucket with one compressor."""
    buffer = bucket.buffer()
    world = state.world_size
    group = state.process_group
    if state.pacer is not None:
        state.pacer.bucket(buffer.numel())
    t0 = clock.now()
    key = state.memory_key(bucket) if state.memory is not None else None
    use_memory = state.memory is not None and (compressor.lossy or key in state.memory.residuals)
    # The adaptive method's dense levels drain a residual at a bounded rate (no dump of
    # what sparse steps withheld) and keep their own rounding error (fp16/bf16, int8).
    drain = use_memory and isinstance(state.policy, NetSensePolicy) and getattr(compressor, "ratio", None) is None
    carry = None
    if drain:
        source, carry = state.memory.drain(key, buffer, state.residual_drain)
    else:
        source = state.memory.compensate(key, buffer) if use_memory else buffer
    if state.method.plugin:
        with state.user_code(f"the compressor plug-in {state.method.text!r} compress()"):
            payload = compressor.compress(source, seed=seed)
    else:
        payload = compressor.compress(source, seed=seed)
    if use_memory:
        if compressor.lossy or drain:
            state.memory.update(key, source, compressor.decompress(payload).reshape(-1), carry=carry)
            if not compressor.lossy and carry is None and compressor.name == "none":
                state.memory.reset(key)  # fully drained and nothing rounded
        else:
            state.memory.reset(key)  # lossless: the residual went out with this bucket
    n = buffer.numel()
    if state.pacer is not None:
        state.pacer.codec(state.decision.level, 4 * n, t0)  # the level's label (dgc, topk, ...)
    codec = clock.now() - t0
    state.count(payload.kept, n, n * 4, codec)

    if compressor.reduction == "allreduce":
        dense = getattr(compressor, "dense", False)
        if not dense and _shares_memory(payload.tensors[0], buffer, source):
            # The bucket is zeroed before the sum is decoded into it: a wire tensor that
            # is a view of it (the obvious identity codec) would be zeroed too, and every
            # gradient with it. Copy it (once per bucket; a codec that copies anyway
            # never pays this).
            payload = Payload((payload.tensors[0].clone(), *payload.tensors[1:]),
                              payload.shape, payload.dtype, payload.kept, payload.meta)
        wire = payload.tensors[0]
        wire.div_(world)  # before the sum, as torch's hooks do (no fp16 overflow)
        if extras is not None:
            wire = torch.cat([wire, (extras / world).to(device=wire.device, dtype=wire.dtype)])
        k = payload.tensors[0].numel()

        def finish_allreduce(fut: torch.futures.Future) -> torch.Tensor:
            t1 = clock.now()
            out = fut.value()
            if extras is not None:
                state.on_extras(out[k:].float())
                out = out[:k]
            if dense:
                if out.data_ptr() != buffer.data_ptr():
                    buffer.copy_(out.view_as(buffer))
            else:
                buffer.zero_()
                compressor.accumulate(Payload((out,), payload.shape, payload.dtype, k, payload.meta), buffer)
            state.count(0, 0, 0, clock.now() - t1)
            return buffer

        return allreduce(wire, group, state.recorder).then(finish_allreduce)

    dtypes = [t.dtype for t in payload.tensors]
    buf = pack(payload.tensors, extras)
    n_extras = 0 if extras is None else extras.numel()
    bound = getattr(compressor, "max_nbytes", None)
    # A byte bound all ranks agree on lets one padded all-gather run (no size exchange).
    capacity = None if bound is None else 8 * len(dtypes) + 4 * n_extras + bound(n)
    accumulate = getattr(compressor, "accumulate", None)

    def finish_gather(fut: torch.futures.Future) -> torch.Tensor:
        t1 = clock.now()
        buffer.zero_()
        ex_sum = None
        for b in fut.value():
            tensors, ex = unpack(b, dtypes, n_extras)
            p = Payload(tuple(tensors), payload.shape, payload.dtype, tensors[0].numel(), payload.meta)
            if accumulate is not None:
                accumulate(p, buffer)
            else:
                buffer.add_(compressor.decompress(p).reshape(-1))
            if ex is not None:
                ex_sum = ex if ex_sum is None else ex_sum + ex
        buffer.div_(world)
        if ex_sum is not None:
            state.on_extras(ex_sum / world)
        state.count(0, 0, 0, clock.now() - t1)
        return buffer

    return allgather_bytes(buf, group, state.recorder, capacity).then(finish_gather)


def _shares_memory(t: torch.Tensor, *others: torch.Tensor) -> bool:
    """Does ``t`` live in the storage of any of ``others`` (a view of it, or itself)?"""
    try:
        ptr = t.untyped_storage().data_ptr()
        return any(o is not None and o.untyped_storage().data_ptr() == ptr for o in others)
    except (RuntimeError, AttributeError):  # a tensor without storage (meta, sparse)
        return False


def compression_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Fixed ``compressor`` methods (built-in or plug-in): ``state.compressor`` every step."""
    state.begin_bucket(bucket)
    assert state.compressor is not None
    # Equal on all ranks for a step and bucket: random-k's shared positions come from it.
    seed = (state.seed * 1_000_003 + state.step) * 1_009 + bucket.index()
    return _reduce_bucket(state, bucket, state.compressor, None, seed)


def netsenseml_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The adaptive methods: the level and kept fraction the policy decided for this step."""
    first = state.begin_bucket(bucket)
    decision = state.decision
    if first and isinstance(state.policy, NetSensePolicy) and rtt_probe_due(
            state.step, decision.level, state.rtt_probe_every):
        # A tiny collective for the monitor's min RTT and queueing delay, on every rank at
        # the same steps (decisions are identical). It runs beside the payload (gloo's
        # second thread), so it neither delays the payload nor times its start.
        probe = allreduce(torch.zeros(1, device=bucket.buffer().device), state.process_group,
                          state.recorder)
    else:
        probe = None
    compressor = state.compressors[decision.level]
    if decision.level == "topk":
        compressor.ratio = decision.ratio  # type: ignore[attr-defined]
    fut = _reduce_bucket(state, bucket, compressor, state.extras_for(first))
    if probe is None:
        return fut

    def joined(f: torch.futures.Future) -> torch.Tensor:
        # The step ends with the probe: a probe still in flight would count in no step's
        # statistics, and one pending when the process group is destroyed aborts the rank.
        probe.wait()
        return f.value()

    return fut.then(joined)


def raw_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A ``hook`` method: ``state.hook(state.hook_state, bucket)``, counted by its group."""
    state.begin_bucket(bucket)
    # Hooks such as PowerSGD launch collectives from completion callbacks. Two buckets in
    # flight at once could then issue collectives in a different order on different ranks,
    # which gloo cannot match; so a bucket starts after the previous one finished.
    if state.serialize_buckets and state.previous_future is not None and bucket.index() != 0:
        state.previous_future.wait()
    if state.pacer is not None:  # released at its profiled time; the hook's codec is not paced
        state.pacer.bucket(bucket.buffer().numel())
    n = bucket.buffer().numel()
    state.count(0, n, n * 4, 0.0)
    assert state.hook is not None
    if state.method.plugin:
        with state.user_code(f"the comm hook plug-in {state.method.text!r}"):
            fut = state.hook(state.hook_state, bucket)
    else:
        fut = state.hook(state.hook_state, bucket)
    state.previous_future = fut
    return fut


def powersgd_state(group: Any, spec: MethodSpec, error_feedback: bool, options: dict[str, Any]) -> Any:
    """torch's ``PowerSGDState`` on the counting ``group`` (``start_powerSGD_iter`` 2, not 1000).

    2 is the earliest torch allows with error feedback; torch's default of 1000 vanilla
    iterations would hide PowerSGD from the short runs of the testbed.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

    return torch_powersgd.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=spec.rank,
        use_error_feedback=error_feedback,
        **{"start_powerSGD_iter": 2, **options},
    )


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    method: str | None = None,
    *,
    process_group: Any = None,
    error_feedback: bool = True,
    **options: Any,
) -> NetSenseState:
    """Registers the hook for ``method`` on ``ddp_model`` and returns its state.

    ``method``: None takes the run's method when the testbed started the job
    (``NETSENSE_METHOD``, ``netsenseml.job``), else ``allreduce`` (DDP's own fp32 allreduce,
    every byte counted); or any form of :data:`METHOD_FORMS`, including a plug-in
    ``package.module:Name[:ARG]`` (``netsenseml/PLUGINS.md``); a failed import or a class
    that is no compressor is a one-line ValueError before the model is touched.

    Options: ``monitor_rate_window`` (8 rate samples), ``monitor_rate_filter`` ("max" of
    the window, as BBR, or "median": ``netsenseml.sense``), ``monitor_min_rate_bytes`` (512 KiB:
    shorter transfers are no rate samples), ``rtt_probe_every`` (16: netsenseml's tiny RTT
    collective every 16 steps, and on every dense step), ``residual_drain`` (1.0: a dense
    level adds at most this times the gradient's norm of the residual per step),
    ``seed`` (0, random-k's shared seed), ``dgc_momentum`` (0.9), ``topk_method``
    ("auto": netsenseml's top-k uses the sampled selector while it keeps 90 % of the exact
    top-k's L2 mass; "exact", "sampled"),
    ``serialize_buckets`` (True; hooks: a bucket waits for the previous one, see the module
    docstring), ``pacer`` (None; an emulated accelerator's ``netsenseml.accelerator.Pacer``); for ``netsenseml`` every :class:`~netsenseml.policy.NetSensePolicy`
    parameter and the probe's ``probe_bytes`` / ``probe_ratio`` (:func:`probe_network`);
    for ``netsenseml-paper`` every :class:`~netsenseml.paper_rule.PaperRule` parameter
    (the prototype's constants by default); for ``powersgd`` the ``PowerSGDState``
    parameters (``start_powerSGD_iter`` defaults to 2, the earliest torch allows with error
    feedback, instead of torch's 1000). A hook method (powersgd, a plug-in hook) creates a
    registered counting process group (``netsenseml.counted_group``), and ``netsenseml``
    probes the network once: both are collective, so call ``register`` on every rank, in
    the same order, as DDP's constructor is.
    """
    if method is None:
        method = job.default_method()
    spec = parse_method(method)  # a bad method is named first, whatever the model
    target = methods.resolve(spec)
    if not callable(getattr(ddp_model, "register_comm_hook", None)):
        raise TypeError(
            f"hooks.register: expects a DistributedDataParallel model, got "
            f"{type(ddp_model).__name__}; wrap it first: "
            "model = torch.nn.parallel.DistributedDataParallel(net)")
    common = {k: options.pop(k) for k in _COMMON_OPTIONS if k in options}
    if common.get("pacer") is None and (timing := job.env_timing()) is not None:
        # an own job under the testbed's emulated accelerator (netsenseml.job)
        common["pacer"] = accelerator.Pacer(
            timing, sum(p.numel() for p in ddp_model.parameters() if p.requires_grad),
            own_job=True)
    probe: dict[str, Any] = {}
    if spec.name == "netsenseml":
        probe = {k: options.pop(k) for k in _PROBE_OPTIONS if k in options}
    policy = compressor = None
    if spec.name == "netsenseml":
        try:  # a path, a parsed table or {level: steps}; None: the stated default
            options["prior"] = convergence.load(options.pop("convergence", options.pop("prior", None)))
        except convergence.ConvergenceError as exc:
            raise ValueError(f"invalid option convergence for method {method!r}: {exc}") from None
    if target.kind == "adaptive":
        policy = target.build(**options)  # an unknown keyword: a one-line ValueError
    elif options and not (target.kind == "hook" and target.info.state):
        raise ValueError(f"unknown options for method {method!r}: {sorted(options)}")
    elif target.kind == "compressor":
        compressor = target.build()
    state = NetSenseState(
        spec,
        process_group=process_group,
        error_feedback=error_feedback,
        policy=policy,
        compressor=compressor,
        memory_kind=target.info.memory or "residual",
        level=compressor.name if spec.plugin and compressor is not None else target.info.label,
        **common,
    )
    hook: Callable[[NetSenseState, dist.GradBucket], torch.futures.Future[torch.Tensor]]
    if target.kind == "hook":
        group = counted_group(process_group, state.recorder)
        state.hook = target.obj
        state.hook_state = group
        if target.info.state:
            factory = methods.import_target(target.info.state, spec.text)
            try:
                state.hook_state = factory(group, spec, error_feedback, options)
            except TypeError as exc:  # an unknown keyword of the hook's state
                raise ValueError(f"invalid options for method {method!r}: {exc}") from None
        hook = raw_hook
    elif target.kind == "adaptive":
        if isinstance(policy, NetSensePolicy):
            state.calibration = probe_network(state, ddp_model, **probe)
            state.decision = policy.calibrate(state.calibration)
            state.observed = state.decision
        hook = netsenseml_hook
    else:
        hook = compression_hook
    ddp_model.register_comm_hook(state, hook)
    state.job = job.attach(state, ddp_model, spec.text)
    return state


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _codec_seconds(compressor: compress.Compressor, x: torch.Tensor, world: int) -> float:
    """Seconds to compress ``x``, update an error-feedback residual and decode ``world`` payloads."""
    out = torch.zeros_like(x)
    _sync(x.device)
    t0 = clock.now()
    payload = compressor.compress(x)
    if compressor.lossy:
        _ = x - compressor.decompress(payload).reshape(-1)
    accumulate = getattr(compressor, "accumulate", None)
    for _ in range(world if compressor.reduction == "allgather" else 1):
        if accumulate is not None:
            accumulate(payload, out)
        else:
            out.add_(compressor.decompress(payload).reshape(-1).to(out.dtype))
    _sync(x.device)
    return clock.now() - t0


def _timed_allreduce(t: torch.Tensor, group: Any) -> float:
    _sync(t.device)
    t0 = clock.now()
    dist.all_reduce(t, group=group)
    _sync(t.device)
    return clock.now() - t0


def _timed_allgather(t: torch.Tensor, group: Any, world: int) -> float:
    outs = [torch.empty_like(t) for _ in range(world)]
    _sync(t.device)
    t0 = clock.now()
    dist.all_gather(outs, t, group=group)
    _sync(t.device)
    return clock.now() - t0


def probe_network(
    state: NetSenseState,
    ddp_model: torch.nn.Module,
    probe_bytes: int = 1 << 20,
    probe_ratio: float = 0.01,
    latency_repeats: int = 3,
    min_transfer_fraction: float = 0.1,
    bandwidth_repeats: int = 3,
) -> Calibration:
    """The registration probe of ``netsenseml`` (module docstring); collective, run once.

    Codec times: each level of the ladder on a random tensor of the gradient's size (top-k
    at ``probe_ratio``), decoding ``world`` payloads for the gathered levels, after a
    warm-up on a small slice. Latency: the fastest of ``latency_repeats`` one-element
    allreduces, and of as many one-byte all-gathers (the fixed cost of the gathered levels).
    Bandwidth: the fastest of ``bandwidth_repeats`` fp32 allreduces of ``min(gradient,
    probe_bytes)`` bytes, each after a one-element allreduce that lines the ranks up; its
    time beyond the latency (at least ``min_transfer_fraction`` of it) per byte. All ranks
    then allreduce their values and use the mean, so they start from the same decision.

    Why 1 MiB and the fastest of three: the first decision and the fastest rate the policy
    has seen both come from this number, and a job that compresses from the first step
    sends no payload long enough to correct it. A transfer below a shaper's burst (HTB's is
    2 ms of the rate) leaves at the line's speed, and a rank descheduled on shared cores
    stretches one; a sample errs long far more often than short, so the fastest of a few is
    the estimate (as for the latency).
    """
    params = [p for p in ddp_model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("netsenseml: the model has no parameter that requires a gradient")
    device = params[0].device
    numel = sum(p.numel() for p in params)
    world, group = state.world_size, state.process_group
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)
    topk = state.compressors["topk"]
    topk_ratio = topk.ratio  # type: ignore[attr-defined]
    topk.ratio = probe_ratio  # type: ignore[attr-defined]
    half = state.policy.half_level if isinstance(state.policy, NetSensePolicy) else "fp16"
    codec = []
    for level in (half, "int8", "topk"):
        if state.pacer is not None:  # an emulated accelerator: its codec, not the host's
            codec.append(state.pacer.timing.codec_s(level, 4 * numel))
            continue
        compressor = state.compressors[level]
        _codec_seconds(compressor, x[: min(numel, 4096)], world)  # warm-up
        codec.append(_codec_seconds(compressor, x, world))
    topk.ratio = topk_ratio  # type: ignore[attr-defined]
    one = torch.zeros(1, device=device)
    latency = min(_timed_allreduce(one, group) for _ in range(latency_repeats))
    byte = torch.zeros(1, dtype=torch.uint8, device=device)  # top-k / int8 payloads are bytes
    gather_latency = min(_timed_allgather(byte, group, world) for _ in range(latency_repeats))
    n = max(1, min(numel, probe_bytes // 4))
    big = torch.zeros(n, device=device)
    timings = []
    for _ in range(max(1, bandwidth_repeats)):
        dist.all_reduce(one, group=group)  # every rank has arrived: the next holds no skew
        timings.append(_timed_allreduce(big, group))
    seconds = min(timings)
    s_per_byte = max(seconds - latency, min_transfer_fraction * seconds) / (4 * n)
    agreed = torch.tensor([latency, s_per_byte * 1e9, *codec, gather_latency], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, group=group)
    latency, s_per_gbyte, c_half, c_int8, c_topk, gather_latency = (agreed / world).tolist()
    index_bytes = torch.empty((), dtype=compress.index_dtype(numel)).element_size()
    return Calibration(
        dense_bytes=4.0 * numel,
        world_size=world,
        latency_s=latency,
        s_per_byte=s_per_gbyte * 1e-9,
        codec_s={"none": 0.0, half: c_half, "int8": c_int8, "topk": c_topk},
        topk_bytes_per_element=4.0 + index_bytes,
        gather_latency_s=gather_latency,
    )
