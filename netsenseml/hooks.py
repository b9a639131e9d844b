"""DDP communication hooks: fixed compression methods and the NetSenseML adaptive method.

Usage, in any PyTorch DDP job (gloo or NCCL, with or without the testbed)::

    from netsenseml import hooks
    state = hooks.register(ddp_model, "netsenseml")   # or "allreduce", "fp16", "topk:0.01", ...
    state = hooks.register(ddp_model, "my_pkg.codecs:SignSGD")   # a plug-in (PLUGINS.md)
    ...
    optimizer.step()
    stats = state.pop_step_stats()                    # bytes_sent, comm_s, kept_ratio, level, ...

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

``netsenseml`` (the adaptive method) adds a step loop around this. Bucket 0 opens a step.
At that moment each rank knows the previous step completely: its period (time between the
two bucket-0 calls), its comm time, its exposed comm time (last collective completion minus
the last bucket's hook call) and so its compute time (period minus exposed comm), its bytes,
and its monitor's max rate / min RTT / queueing delay. These seven float32 values ride on
bucket 0's own collective (appended to the allreduced buffer pre-divided by the world size,
or packed into the gathered bytes), so every rank receives the same **mean over ranks**
without an extra round trip. When that collective completes, the policy
(``netsenseml.policy``) turns the mean into the decision (level, kept fraction) that the
*next* step uses for all its buckets: decisions are identical on all ranks and never change
inside a step. (For fp16/bf16 levels the piggy-backed values travel in that dtype, in ms and
MB units; their precision then is that of the dtype, still identical on all ranks.)

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

import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from netsenseml import compress, methods
from netsenseml.comm import CommRecorder, allgather_bytes, allreduce, pack, unpack
from netsenseml.compress.base import Payload
from netsenseml.counted_group import counted_group
from netsenseml.memory import MomentumCorrectionMemory, ResidualMemory
from netsenseml.methods import METHOD_FORMS as METHOD_FORMS  # re-exported: the accepted forms
from netsenseml.methods import MethodSpec
from netsenseml.policy import Decision, NetSensePolicy, Observation
from netsenseml.sense import NetworkMonitor

N_EXTRAS = 7  # valid, comm_ms, compute_ms, bytes_MB, rate_MBps, min_rtt_ms, queue_ms
_COMMON_OPTIONS = ("monitor_window_s", "seed", "dgc_momentum", "topk_method", "serialize_buckets")


def parse_method(spec: str) -> MethodSpec:
    """Validates a method string (grammar of ``netsenseml.methods``; plug-ins not imported).

    A ValueError is one line naming the spec and :data:`METHOD_FORMS`.
    """
    return methods.parse(spec)


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
        monitor: the network monitor, fed one sample per collective of this rank.
        recorder: bytes / busy-time accounting of this rank's collectives.
        policy: the adaptive policy (``netsenseml`` only).
        decision: level and kept fraction used by the current step.
        hook, hook_state: a ``hook`` method's function and the state it is called with
            (a :class:`~netsenseml.counted_group.CountedGroup`, or an object holding one).
        powersgd: torch's ``PowerSGDState`` (``powersgd`` only).
        step: number of steps started (bucket-0 calls).

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
    * ``ratio`` -- the top-k kept fraction in use (1.0 otherwise).
    """

    def __init__(
        self,
        method: MethodSpec,
        process_group: Any = None,
        error_feedback: bool = True,
        monitor_window_s: float = 5.0,
        topk_method: str = "sampled",
        dgc_momentum: float = 0.9,
        seed: int = 0,
        policy: NetSensePolicy | None = None,
        compressor: compress.Compressor | None = None,
        memory_kind: str = "residual",
        level: str | None = None,
        serialize_buckets: bool = True,
    ) -> None:
        self.method = method
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.error_feedback = error_feedback
        self.monitor = NetworkMonitor(monitor_window_s)
        self.recorder = CommRecorder(self.monitor)
        self.policy = policy
        self.compressor = compressor
        self.hook: Callable[[Any, dist.GradBucket], torch.futures.Future] | None = None
        self.hook_state: Any = None
        self.serialize_buckets = serialize_buckets
        self.seed = seed
        self.step = 0
        self.memory: ResidualMemory | None = None
        # Error feedback follows the compressor's declared ``lossy``; the adaptive method
        # may pick lossy levels at any step, so it always keeps a residual.
        if error_feedback and ((compressor is not None and compressor.lossy) or policy is not None):
            kind = memory_kind if compressor is not None else "residual"
            self.memory = MomentumCorrectionMemory(dgc_momentum) if kind == "momentum" else ResidualMemory()
        self._compressors: dict[str, compress.Compressor] = {}
        if policy is not None:
            for info in methods.ladder():
                made = methods.resolve(info.name if info.arg is None else f"{info.name}:1").build()
                self._compressors[info.label] = made
            self._compressors["topk"] = compress.TopKCompressor(0.1, method=topk_method)
        self.decision = Decision(level or method.level, method.ratio or 1.0)
        self._pending: Decision | None = None
        self._hook_prev: torch.futures.Future | None = None
        self._lock = threading.Lock()
        # Per-step bookkeeping of the previous step (for the policy's observation).
        self._step_start: float | None = None
        self._last_bucket_call = 0.0
        self._totals_at_step_start = self.recorder.totals()
        self._prev_obs: torch.Tensor | None = None
        # Stats since the last pop.
        self._stats_totals = self.recorder.totals()
        self._kept = 0
        self._elements = 0
        self._codec_s = 0.0
        self._bytes_dense = 0
        # Bucket layouts, to carry residuals over DDP's bucket rebuild.
        self._layouts: dict[int, tuple[int, ...]] = {}
        self._params: dict[int, torch.Tensor] = {}
        self._pool: dict[tuple[str, int], torch.Tensor] = {}

    @property
    def powersgd(self) -> Any:
        """torch's ``PowerSGDState`` (``powersgd`` only, else None)."""
        return self.hook_state if self.method.name == "powersgd" else None

    # ----------------------------------------------------------------- statistics
    def pop_step_stats(self) -> dict[str, Any]:
        """Returns and resets this rank's statistics since the last call (see class doc)."""
        totals = self.recorder.totals()
        with self._lock:
            sent = int(totals[0] - self._stats_totals[0])
            if self.hook is not None:  # a raw hook: only its bytes are known
                kept = sent / self._bytes_dense if self._bytes_dense else 1.0
            else:
                kept = self._kept / self._elements if self._elements else 1.0
            out = {
                "bytes_sent": sent,
                "comm_s": float(totals[1] - self._stats_totals[1]),
                "kept_ratio": float(kept),
                "level": self.decision.level,
                "ratio": float(self.decision.ratio),
                "codec_s": float(self._codec_s),
                "bytes_dense": int(self._bytes_dense),
            }
            self._stats_totals = totals
            self._kept = self._elements = self._bytes_dense = 0
            self._codec_s = 0.0
        return out

    def _count(self, kept: int, elements: int, dense_bytes: int, codec_s: float) -> None:
        with self._lock:
            self._kept += kept
            self._elements += elements
            self._bytes_dense += dense_bytes
            self._codec_s += codec_s

    # ----------------------------------------------------------------- step loop
    def begin_bucket(self, bucket: dist.GradBucket) -> bool:
        """Called first by every hook; returns True when ``bucket`` opens a new step."""
        now = time.perf_counter()
        first = bucket.index() == 0
        if first:
            totals = self.recorder.totals()
            if self._step_start is not None:
                period = now - self._step_start
                comm = totals[1] - self._totals_at_step_start[1]
                exposed = max(0.0, totals[3] - self._last_bucket_call)
                compute = max(period - exposed, 1e-6)
                nbytes = totals[0] - self._totals_at_step_start[0]
                est = self.monitor.estimate()
                rate, rtt, queue = (est.max_rate, est.min_rtt, est.queue_delay) if est else (0, 0, 0)
                self._prev_obs = torch.tensor(
                    [1.0, comm * 1e3, compute * 1e3, nbytes / 1e6, rate / 1e6, rtt * 1e3, queue * 1e3],
                    dtype=torch.float32,
                )
            self._step_start = now
            self._totals_at_step_start = totals
            if self._pending is not None:
                self.decision = self._pending
                self._pending = None
            self.step += 1
        self._last_bucket_call = now
        return first

    def _on_extras(self, mean: torch.Tensor) -> None:
        """Feeds the policy with the mean over ranks of the piggy-backed observation."""
        if self.policy is None:
            return
        v = [float(x) for x in mean]
        if v[0] < 0.999:  # some rank had no complete previous step yet
            return
        rate, rtt = v[4] * 1e6, v[5] * 1e-3
        obs = Observation(
            comm_s=v[1] * 1e-3,
            compute_s=v[2] * 1e-3,
            inflight_bytes=v[3] * 1e6,
            bdp=rate * rtt if rate > 0 and rtt > 0 else None,
        )
        self._pending = self.policy.observe(obs)

    def extras_for(self, first: bool) -> torch.Tensor | None:
        """The observation to piggy-back on this bucket (netsenseml, bucket 0 only)."""
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
    t0 = time.perf_counter()
    key = state.memory_key(bucket) if state.memory is not None else None
    use_memory = state.memory is not None and (compressor.lossy or key in state.memory.residuals)
    source = state.memory.compensate(key, buffer) if use_memory else buffer
    payload = compressor.compress(source, seed=seed)
    if use_memory:
        if compressor.lossy:
            state.memory.update(key, source, compressor.decompress(payload).reshape(-1))
        else:
            state.memory.reset(key)  # lossless: the residual went out with this bucket
    codec = time.perf_counter() - t0
    n = buffer.numel()
    state._count(payload.kept, n, n * 4, codec)

    if compressor.reduction == "allreduce":
        wire = payload.tensors[0]
        wire.div_(world)  # before the sum, as torch's hooks do (no fp16 overflow)
        if extras is not None:
            wire = torch.cat([wire, (extras / world).to(device=wire.device, dtype=wire.dtype)])
        dense = getattr(compressor, "dense", False)
        k = payload.tensors[0].numel()

        def finish_allreduce(fut: torch.futures.Future) -> torch.Tensor:
            t1 = time.perf_counter()
            out = fut.value()
            if extras is not None:
                state._on_extras(out[k:].float())
                out = out[:k]
            if dense:
                if out.data_ptr() != buffer.data_ptr():
                    buffer.copy_(out.view_as(buffer))
            else:
                buffer.zero_()
                compressor.accumulate(Payload((out,), payload.shape, payload.dtype, k, payload.meta), buffer)
            state._count(0, 0, 0, time.perf_counter() - t1)
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
        t1 = time.perf_counter()
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
            state._on_extras(ex_sum / world)
        state._count(0, 0, 0, time.perf_counter() - t1)
        return buffer

    return allgather_bytes(buf, group, state.recorder, capacity).then(finish_gather)


def compression_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Fixed ``compressor`` methods (built-in or plug-in): ``state.compressor`` every step."""
    state.begin_bucket(bucket)
    assert state.compressor is not None
    # Equal on all ranks for a step and bucket: random-k's shared positions come from it.
    seed = (state.seed * 1_000_003 + state.step) * 1_009 + bucket.index()
    return _reduce_bucket(state, bucket, state.compressor, None, seed)


def netsenseml_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The adaptive method: the level and kept fraction the policy decided for this step."""
    first = state.begin_bucket(bucket)
    decision = state.decision
    compressor = state._compressors[decision.level]
    if decision.level == "topk":
        compressor.ratio = decision.ratio  # type: ignore[attr-defined]
    return _reduce_bucket(state, bucket, compressor, state.extras_for(first))


def raw_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A ``hook`` method: ``state.hook(state.hook_state, bucket)``, counted by its group."""
    state.begin_bucket(bucket)
    # Hooks such as PowerSGD launch collectives from completion callbacks. Two buckets in
    # flight at once could then issue collectives in a different order on different ranks,
    # which gloo cannot match; so a bucket starts after the previous one finished.
    if state.serialize_buckets and state._hook_prev is not None and bucket.index() != 0:
        state._hook_prev.wait()
    n = bucket.buffer().numel()
    state._count(0, n, n * 4, 0.0)
    assert state.hook is not None
    fut = state.hook(state.hook_state, bucket)
    state._hook_prev = fut
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
    method: str,
    *,
    process_group: Any = None,
    error_feedback: bool = True,
    **options: Any,
) -> NetSenseState:
    """Registers the hook for ``method`` on ``ddp_model`` and returns its state.

    ``method``: any form of :data:`METHOD_FORMS`, including a plug-in
    ``package.module:Name[:ARG]`` (``netsenseml/PLUGINS.md``); a failed import or a class
    that is no compressor is a one-line ValueError before the model is touched.

    Options: ``monitor_window_s`` (5.0), ``seed`` (0, random-k's shared seed),
    ``dgc_momentum`` (0.9), ``topk_method`` ("sampled"; netsenseml's top-k variant),
    ``serialize_buckets`` (True; hooks: a bucket waits for the previous one, see the module
    docstring); for ``netsenseml`` every :class:`~netsenseml.policy.NetSensePolicy`
    parameter (paper defaults); for ``powersgd`` the ``PowerSGDState`` parameters
    (``start_powerSGD_iter`` defaults to 2, the earliest torch allows with error feedback,
    instead of torch's 1000). A hook method (powersgd, a plug-in hook) creates a registered
    counting process group (``netsenseml.counted_group``), which is collective: call
    ``register`` on every rank, in the same order, as DDP's constructor is.
    """
    spec = parse_method(method)
    target = methods.resolve(spec)
    common = {k: options.pop(k) for k in _COMMON_OPTIONS if k in options}
    policy = compressor = None
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
        hook = netsenseml_hook
    else:
        hook = compression_hook
    ddp_model.register_comm_hook(state, hook)
    return state
