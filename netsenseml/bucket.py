"""One bucket through a compressor: steps 1-5 of ``netsenseml.hooks``' algorithm
(compensate with the error-feedback residual, compress and keep the new residual,
communicate by the compressor's ``reduction``, decode into the bucket, count), written once
for the fixed and the adaptive hooks. Payload mode's codecs (``netsenseml.payload``) take
the same path and skip only the work on values (dividing, decoding).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from netsenseml import clock, compress
from netsenseml.comm import allgather_packed, allreduce
from netsenseml.compress.base import Payload
from netsenseml.payload import is_payload
from netsenseml.state import NetSenseState


def reduce_bucket(state: NetSenseState, bucket: dist.GradBucket, compressor: compress.Codec,
                   extras: torch.Tensor | None, seed: int | None = None) -> torch.futures.Future[torch.Tensor]:
    """Steps 1-5 of the module docstring for one bucket with one compressor."""
    n = bucket.buffer().numel()
    if state.pacer is not None:
        state.pacer.bucket(n)
    t0 = clock.now()
    feedback = state.bucket_feedback(bucket, compressor)  # error feedback (netsenseml.memory)
    source = feedback.compensate(bucket.buffer())  # 1. compensate
    if state.method.plugin:  # 2. compress
        with state.user_code(f"the compressor plug-in {state.method.text!r} compress()"):
            payload = compressor.compress(source, seed=seed)
    else:
        payload = compressor.compress(source, seed=seed)
    feedback.keep(source, payload)
    if state.pacer is not None:
        # the level's label (dgc, topk, ...); per bucket where the policy decides per bucket
        state.pacer.codec(state.decision.for_bucket(bucket.index()).level, 4 * n, t0)
    state.count(payload.kept, n, n * 4, clock.now() - t0)
    if compressor.reduction == "allreduce":  # 3. send, 4. decode into the bucket
        return _allreduce_bucket(state, bucket.buffer(), source, compressor, payload, extras)
    return _allgather_bucket(state, bucket.buffer(), compressor, payload, extras, bucket.index())


def _allreduce_bucket(state: NetSenseState, buffer: torch.Tensor, source: torch.Tensor,
                      compressor: compress.Codec, payload: Payload,
                      extras: torch.Tensor | None) -> torch.futures.Future[torch.Tensor]:
    """A summable payload: divided by the world size, allreduced, decoded into the bucket."""
    world = state.world_size
    dense = compressor.dense
    values = not is_payload(compressor)  # payload mode: zeros of the real sizes, no decoding
    if values and not dense and _shares_memory(payload.tensors[0], buffer, source):
        # The bucket is zeroed before the sum is decoded into it: a wire tensor that is a
        # view of it (the obvious identity codec) would be zeroed too, and every gradient
        # with it. Copy it (once per bucket; a codec that copies anyway never pays this).
        payload = Payload((payload.tensors[0].clone(), *payload.tensors[1:]),
                          payload.shape, payload.dtype, payload.kept, payload.meta)
    wire = payload.tensors[0]
    if values:
        wire.div_(world)  # before the sum, as torch's hooks do (no fp16 overflow)
    if extras is not None:
        wire = torch.cat([wire, (extras / world).to(device=wire.device, dtype=wire.dtype)])
    k = payload.tensors[0].numel()

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        t1 = clock.now()
        out = fut.value()
        if extras is not None:
            state.on_extras(out[k:].float())
            out = out[:k]
        if not values:
            pass
        elif dense:
            if out.data_ptr() != buffer.data_ptr():
                buffer.copy_(out.view_as(buffer))
        else:
            buffer.zero_()
            compressor.accumulate(Payload((out,), payload.shape, payload.dtype, k, payload.meta), buffer)
        state.count(0, 0, 0, clock.now() - t1)
        return buffer

    return allreduce(wire, state.process_group, state.recorder).then(finish)


def _allgather_bucket(state: NetSenseState, buffer: torch.Tensor, compressor: compress.Codec,
                      payload: Payload, extras: torch.Tensor | None,
                      index: int) -> torch.futures.Future[torch.Tensor]:
    """A per-rank payload: all-gathered (packed by the communicator), each rank's decoded
    and summed, averaged. Payload mode keeps the all-gather's buffers of bucket ``index``."""
    world = state.world_size
    bound = compressor.max_nbytes
    kept = (compressor.gather_buffers, index) if is_payload(compressor) else None
    # A byte bound all ranks agree on lets one padded all-gather run (no size exchange).
    packing, gathered = allgather_packed(payload.tensors, extras, state.process_group, state.recorder,
                                         None if bound is None else bound(buffer.numel()), kept)

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        t1 = clock.now()
        if is_payload(compressor):  # nothing to decode; the observations still count
            if packing.n_extras:
                state.on_extras(sum(packing.extras(b) for b in fut.value()) / world)
            state.count(0, 0, 0, clock.now() - t1)
            return buffer
        buffer.zero_()
        ex_sum = None
        for b in fut.value():
            tensors, ex = packing.unpack(b)
            p = Payload(tuple(tensors), payload.shape, payload.dtype, tensors[0].numel(), payload.meta)
            compressor.accumulate(p, buffer)
            if ex is not None:
                ex_sum = ex if ex_sum is None else ex_sum + ex
        buffer.div_(world)
        if ex_sum is not None:
            state.on_extras(ex_sum / world)
        state.count(0, 0, 0, clock.now() - t1)
        return buffer

    return gathered.then(finish)


def _shares_memory(t: torch.Tensor, *others: torch.Tensor) -> bool:
    """Does ``t`` live in the storage of any of ``others`` (a view of it, or itself)?"""
    try:
        ptr = t.untyped_storage().data_ptr()
        return any(o is not None and o.untyped_storage().data_ptr() == ptr for o in others)
    except (RuntimeError, AttributeError):  # a tensor without storage (meta, sparse)
        return False
