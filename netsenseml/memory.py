"""Error feedback, kept apart from the compressors: any lossy compressor + a residual memory.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019) adds to each new gradient what
earlier compression left out, so nothing is lost, only delayed::

    c_t   = g_t + e_{t-1}          # compensate
    s_t   = D(C(c_t))              # what this rank actually sent, decoded locally
    e_t   = c_t - s_t              # residual kept for the next step

Summed over steps: ``sum_t s_t + e_T = sum_t g_t`` exactly (up to float rounding) -- the
invariant the distributed tests check.

DGC's momentum correction (Lin et al. 2018) is the same memory with a velocity in front:
``u_t = m * u_{t-1} + g_t``; ``c_t = e_{t-1} + u_t``; after sending, both ``u`` and ``e`` are
cleared where elements were sent (momentum factor masking). Use it with a plain SGD
optimizer (no optimizer momentum), as in the paper.

Memories are keyed by any hashable (the hooks use the DDP bucket index) and hold one flat
tensor per key.

The hooks ask error feedback through two calls and nothing else (GRACE's memory, kept
whole here): :func:`for_method` (which memory a method keeps, if any) and
:meth:`ErrorFeedback.bucket` (a bucket's :class:`BucketFeedback`: ``compensate`` before
compressing, ``keep`` after). What a codec declares decides the rest: ``lossy`` (it keeps a
residual), ``ratio`` (None for the dense levels, which may drain a residual that sparse
steps left, at a bounded rate) and ``exact`` (its decoded payload is its input, so a fully
drained residual is dropped).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from netsenseml.compress.base import Codec, Payload


class ResidualMemory:
    """Plain error feedback: one residual tensor per key."""

    def __init__(self) -> None:
        self.residuals: dict[Hashable, torch.Tensor] = {}

    def compensate(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        """Returns ``grad + residual`` (a new tensor; ``grad`` is left untouched)."""
        res = self.residuals.get(key)
        if res is None or res.shape != grad.shape:
            return grad.clone()
        return grad + res

    def drain(self, key: Hashable, grad: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(grad + s x residual, (1 - s) x residual)`` with ``s`` the largest share in
        [0, 1] whose norm is at most ``factor`` x the gradient's.

        Why: after many steps of heavy sparsification the residual holds many steps'
        worth of withheld gradient; a switch to a level that sends everything would add it
        in one step (an update many times the gradient's norm, amplified by momentum).
        Drained at a bounded rate, the update stays within ``1 + factor`` times the
        gradient's norm (triangle inequality) and nothing is lost, only delayed further.
        The second tensor (None when nothing is held back) is carried to the next step.
        """
        res = self.residuals.get(key)
        if res is None or res.shape != grad.shape:
            return grad.clone(), None
        r_norm = float(res.norm())
        share = 1.0 if r_norm == 0 else min(1.0, factor * float(grad.norm()) / r_norm)
        if share >= 1.0:
            return grad + res, None
        return grad + share * res, (1.0 - share) * res

    def update(self, key: Hashable, compensated: torch.Tensor, sent: torch.Tensor,
               carry: torch.Tensor | None = None) -> None:
        """Stores ``compensated - sent`` (+ ``carry``, what :meth:`drain` held back) as the
        residual of ``key``."""
        res = compensated - sent
        self.residuals[key] = res if carry is None else res.add_(carry)

    def reset(self, key: Hashable | None = None) -> None:
        if key is None:
            self.residuals.clear()
        else:
            self.residuals.pop(key, None)


class MomentumCorrectionMemory(ResidualMemory):
    """DGC momentum correction + factor masking (see module docstring)."""

    def __init__(self, momentum: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must satisfy 0 <= m < 1, got {momentum}")
        self.momentum = momentum
        self.velocities: dict[Hashable, torch.Tensor] = {}

    def compensate(self, key: Hashable, grad: torch.Tensor) -> torch.Tensor:
        u = self.velocities.get(key)
        u = grad.clone() if u is None or u.shape != grad.shape else u.mul_(self.momentum).add_(grad)
        self.velocities[key] = u
        return super().compensate(key, u)

    def update(self, key: Hashable, compensated: torch.Tensor, sent: torch.Tensor,
               carry: torch.Tensor | None = None) -> None:
        super().update(key, compensated, sent, carry)
        # Momentum factor masking: where an element was sent, its velocity restarts.
        self.velocities[key].masked_fill_(sent != 0, 0.0)


class BucketResiduals:
    """A memory keyed by DDP bucket index whose residuals follow the parameters when DDP
    rebuilds its buckets (after the first step it re-buckets by the order gradients became
    ready): a changed layout dissolves every residual into per-parameter pieces, and each
    new bucket is assembled from its parameters' pieces (zeros where none)."""

    def __init__(self, memory: ResidualMemory) -> None:
        self.memory = memory
        self._layouts: dict[int, tuple[int, ...]] = {}
        self._params: dict[int, torch.Tensor] = {}
        self._pool: dict[tuple[str, int], torch.Tensor] = {}

    def key(self, index: int, params: list[torch.Tensor]) -> int:
        """The memory key of bucket ``index`` holding ``params`` (its index)."""
        layout = tuple(id(p) for p in params)
        if self._layouts.get(index) != layout:
            if index in self._layouts:
                self._dissolve()  # DDP rebuilt its buckets: residuals back to parameters
            self._layouts[index] = layout
            for p in params:
                self._params[id(p)] = p
            self._assemble(index, layout)
        return index

    def _stores(self) -> dict[str, dict]:
        stores: dict[str, dict] = {"residual": self.memory.residuals}
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

    def by_param(self) -> dict[torch.Tensor, torch.Tensor]:
        """The current residual of each parameter, shaped like it."""
        out = {}
        for (name, pid), piece in self._pool.items():
            if name == "residual":
                out[self._params[pid]] = piece.view_as(self._params[pid])
        for idx, flat in self.memory.residuals.items():
            for pid, piece in self._split(idx, flat):
                p = self._params[pid]
                out[p] = piece.view_as(p)
        return out


def for_method(enabled: bool, lossy: bool, adaptive: bool, kind: str | None = None,
               momentum: float = 0.9) -> ResidualMemory | None:
    """The memory a method keeps: none without error feedback (``enabled`` False) or for a
    lossless fixed compressor; an adaptive method (``adaptive``) may pick lossy levels at
    any step, so it always keeps one. ``kind``: a fixed compressor's declared ``memory``
    (``"momentum"``: DGC's momentum correction); None without one (plain residual)."""
    if not enabled or not (lossy or adaptive):
        return None
    return MomentumCorrectionMemory(momentum) if kind == "momentum" else ResidualMemory()


class BucketFeedback:
    """Error feedback of one bucket with one codec: :meth:`compensate` (the gradient plus
    what earlier steps left, or a bounded share of it on a draining dense level) and
    :meth:`keep` (the new residual: what the compensated gradient held beyond what the
    payload sends). Without a memory both pass the gradient through."""

    def __init__(self, memory: ResidualMemory | None, key: Hashable, codec: Codec,
                 drain: float | None) -> None:
        self.memory, self.key, self.codec = memory, key, codec
        self.use = memory is not None and (codec.lossy or key in memory.residuals)
        # a dense level (no kept fraction) drains, where the policy asks for it
        self.drain = self.use and drain is not None and codec.ratio is None
        self.factor = drain
        self.carry: torch.Tensor | None = None

    def compensate(self, grad: torch.Tensor) -> torch.Tensor:
        """What the codec compresses (``grad`` itself when no residual applies)."""
        if self.memory is None:
            return grad
        if self.drain:
            assert self.factor is not None
            source, self.carry = self.memory.drain(self.key, grad, self.factor)
            return source
        return self.memory.compensate(self.key, grad) if self.use else grad

    def keep(self, source: torch.Tensor, payload: Payload) -> None:
        """The new residual: what ``source`` held beyond what ``payload`` sends."""
        memory, c = self.memory, self.codec
        if memory is None or not self.use:
            return
        if not (c.lossy or self.drain):
            memory.reset(self.key)  # lossless: the residual went out with this bucket
            return
        memory.update(self.key, source, c.decompress(payload).reshape(-1), carry=self.carry)
        if not c.lossy and self.carry is None and c.exact:
            memory.reset(self.key)  # fully drained and nothing rounded


class ErrorFeedback:
    """A method's error feedback across its buckets: the memory (None: no error feedback),
    keyed by DDP bucket index with residuals that follow the parameters
    (:class:`BucketResiduals`), and the drain rule (``drain``: at most that times the
    gradient's norm of a residual added per step on a dense level; None: never drained)."""

    def __init__(self, memory: ResidualMemory | None, drain: float | None = None) -> None:
        self.memory = memory
        self.residuals = BucketResiduals(memory) if memory is not None else None
        self.drain = drain

    def bucket(self, bucket: dist.GradBucket, codec: Codec) -> BucketFeedback:
        """DDP's ``bucket`` compressed by ``codec`` this step (its parameters are read only
        where a memory is kept: payload mode's buckets have none)."""
        if self.residuals is None:
            return BucketFeedback(None, bucket.index(), codec, self.drain)
        key = self.residuals.key(bucket.index(), bucket.parameters())
        return BucketFeedback(self.memory, key, codec, self.drain)

    def by_param(self) -> dict[torch.Tensor, torch.Tensor]:
        """The current residual of each parameter, shaped like it."""
        return {} if self.residuals is None else self.residuals.by_param()
