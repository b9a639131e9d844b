"""Payload mode: every collective carries the bytes a method would send, no gradient value.

Why: a throughput run measures sizes and times -- the bytes each method hands to its
collectives, the times the network takes for them, the compute and codec times of the
device (an accelerator profile, ``netsenseml.accelerator``) and the policy's decisions,
whose inputs are times, bytes, rates and delays, never a gradient's values (all-gathers
are padded to ``max_nbytes``, so even a sampled top-k's bytes do not depend on them). The
host's real codec work (exact top-k of 11-135 M values on every rank) is then what sets a
dilated run's cost, not the network it measures. The field replays payloads for the same
reason (SimAI's physical mode, NeuronaBox, PrismLLM: ``../shared/DESIGN.md``).

In payload mode the hook path is the same code as in every other run (``netsenseml.hooks``:
the pacer's release of each bucket and its profiled codec time, the collectives, their
accounting, the monitor, the policy and the observations piggy-backed on bucket 0); only
the codec is swapped for its :class:`PayloadCodec`, which hands over zeros of exactly the
sizes and dtypes the real codec's ``compress`` returns (its ``wire``) and decodes nothing,
and there is no error feedback (there is nothing to feed back). An all-gather's buffers are
kept from step to step (``comm.GatherBuffers``), as a device's caching allocator keeps them. PowerSGD, a hook that
computes its own payload, is replaced by :func:`powersgd_hook`, which issues torch's
``powerSGD_hook``'s three allreduces (the uncompressed 1-D tensors, the P and the Q
matrices) at their real sizes and schedule, from the first step
(``MethodSpec.payload_dense_steps``).

What cannot run in payload mode, refused in one line: a comm-hook plug-in (it computes its
own payload), a compressor plug-in that declares neither ``wire`` nor ``max_nbytes``, and a
method whose policy needs gradient values. ``tests/netsenseml/test_payload.py`` holds every
built-in's payload equal, byte for byte and collective for collective, to its real codec's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from netsenseml.comm import GatherBuffers
from netsenseml.compress.base import Codec, Compressor, Payload, Wire, declare


class PayloadError(ValueError):
    """A method that cannot run in payload mode; ``str()`` is one line."""


def check_compressor(compressor: Any, method: str) -> None:
    """Refuses a compressor whose wire sizes cannot be known without compressing."""
    codec = declare(compressor)
    if codec.wire is None and codec.max_nbytes is None:
        raise PayloadError(
            f"method {method!r}: payload mode needs the compressor's wire sizes without "
            "compressing; declare wire(numel, dtype) or max_nbytes(numel) on it "
            "(netsenseml/PLUGINS.md), or use grads: recorded")


class PayloadCodec(Codec):
    """Stands in for ``inner`` (module docstring): the same name, reduction and byte bound,
    wire tensors of its real sizes holding zeros (allocated once per size and reused: an
    allreduce of zeros stays zeros), nothing decoded. ``ratio`` (top-k's kept fraction, set
    by the adaptive methods each step) is the inner codec's."""

    lossy = False  # no error feedback: there is no value to keep

    def __init__(self, inner: Compressor) -> None:
        self.inner = declare(inner)
        self.name = inner.name
        self.reduction = inner.reduction
        self.dense = False  # the wire is never the bucket: nothing is copied back
        self._zeros: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}
        self.max_nbytes = self.inner.max_nbytes
        #: all-gather buffers kept from step to step, a set per bucket (``comm.GatherBuffers``)
        self.gather_buffers = GatherBuffers()

    @property
    def ratio(self) -> float | None:
        return self.inner.ratio

    @ratio.setter
    def ratio(self, value: float) -> None:
        self.inner.ratio = value

    def layout(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        """The inner codec's wire sizes; a plug-in with only a byte bound: one uint8 wire
        tensor of the bound (or fp32 words of it where the payload is summed)."""
        if self.inner.wire is not None:
            return self.inner.wire(numel, dtype, seed)
        assert self.inner.max_nbytes is not None  # check_compressor refuses a codec without both
        nbytes = int(self.inner.max_nbytes(numel))
        if self.reduction == "allreduce":
            return ((-(-nbytes // 4), torch.float32),), numel
        return ((nbytes, torch.uint8),), numel

    def zeros(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (numel, dtype, device)
        t = self._zeros.get(key)
        if t is None:
            t = self._zeros[key] = torch.zeros(numel, dtype=dtype, device=device)
        return t

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        wire, kept = self.layout(tensor.numel(), tensor.dtype, seed)
        tensors = tuple(self.zeros(n, dt, tensor.device) for n, dt in wire)
        return Payload(tensors, tensor.shape, tensor.dtype, kept=kept)

    def decompress(self, payload: Payload) -> torch.Tensor:
        return torch.zeros(payload.shape, dtype=payload.dtype)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Nothing to decode: the values are zeros and no step uses them."""


def is_payload(compressor: Any) -> bool:
    return isinstance(compressor, PayloadCodec)


# ----------------------------------------------------------------------------- PowerSGD
@dataclass
class PowerSGDPayload:
    """The state of :func:`powersgd_hook`: torch's ``PowerSGDState`` fields that decide
    sizes and schedule (rank, ``min_compression_rate``, ``start_powerSGD_iter``), the
    counting group, and buffers reused per bucket."""

    process_group: Any
    matrix_approximation_rank: int
    start_powerSGD_iter: int = 2
    min_compression_rate: float = 2.0
    iter: int = 0
    buffers: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)

    @property
    def compressing(self) -> bool:
        """Past the dense start: this step computes P and Q (the profile's codec time)."""
        return self.iter >= self.start_powerSGD_iter

    def sizes(self, shapes: list[torch.Size]) -> tuple[int, int, int]:
        """Elements of the uncompressed tensors, of the Ps and of the Qs of one bucket:
        torch's ``_should_compress`` on each gradient viewed as ``shape[0] x rest``."""
        unc = ps = qs = 0
        for shape in shapes:
            numel = 1
            for s in shape:
                numel *= int(s)
            n = int(shape[0]) if len(shape) else 1
            m = numel // max(n, 1)
            r = min(n, m, self.matrix_approximation_rank)
            if (n + m) * r * self.min_compression_rate < n * m:
                ps += n * r
                qs += m * r
            else:
                unc += numel
        return unc, ps, qs

    def zeros(self, index: int, part: str, numel: int, like: torch.Tensor) -> torch.Tensor:
        t = self.buffers.get((index, part))
        if t is None or t.numel() != numel:
            t = self.buffers[(index, part)] = torch.zeros(numel, dtype=like.dtype, device=like.device)
        return t


def powersgd_state(group: Any, spec: Any, error_feedback: bool, options: dict[str, Any]) -> PowerSGDPayload:
    """:class:`PowerSGDPayload` with ``hooks.powersgd_state``'s options, low-rank from the
    first step (``MethodSpec.payload_dense_steps``)."""
    known = {"start_powerSGD_iter", "min_compression_rate"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"payload mode: PowerSGD options {unknown} have no payload meaning; "
                         f"allowed: {sorted(known)}")
    return PowerSGDPayload(group, spec.rank, **{"start_powerSGD_iter": spec.payload_dense_steps,
                                                 **options})


def powersgd_hook(state: PowerSGDPayload, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """torch's ``powerSGD_hook``'s collectives at their real sizes, on zeros: a dense
    allreduce of the bucket before ``start_powerSGD_iter``; after it the uncompressed
    tensors' allreduce, then P's, then Q's, each launched when the one before completed
    (from its callback, as torch's hook does)."""
    group = state.process_group
    buffer = bucket.buffer()
    index = bucket.index()
    compressing = state.compressing
    if bucket.is_last():
        state.iter += 1
    if not compressing:
        dense = state.zeros(index, "dense", buffer.numel(), buffer)
        fut = dist.all_reduce(dense, group=group, async_op=True).get_future()
        return fut.then(lambda _f: buffer)
    unc, ps, qs = state.sizes([g.shape for g in bucket.gradients()])
    unc_t = state.zeros(index, "uncompressed", unc, buffer)
    p_t = state.zeros(index, "p", ps, buffer)
    q_t = state.zeros(index, "q", qs, buffer)

    def then_allreduce(t: torch.Tensor) -> Callable[[torch.futures.Future], torch.Tensor]:
        def launch(_f: torch.futures.Future) -> torch.Tensor:
            dist.all_reduce(t, group=group, async_op=True).get_future().wait()
            return buffer
        return launch

    fut = dist.all_reduce(unc_t, group=group, async_op=True).get_future()
    return fut.then(then_allreduce(p_t)).then(then_allreduce(q_t))
