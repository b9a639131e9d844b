"""The compressor protocol shared by every family, and the payload that goes on the wire.

A compressor turns a tensor into a :class:`Payload` (the tensors handed to
``torch.distributed``) and back. Keeping the protocol this small is what lets the hooks
treat every method the same way (GRACE's split of compressor / memory / communicator):

* ``compress(tensor, seed=None) -> Payload`` -- ``payload.nbytes`` is the exact number of
  bytes of the wire tensors; nothing else (shape, dtype, seeds) is counted because every
  rank knows it already.
* ``decompress(payload) -> Tensor`` -- a dense tensor of the original shape and dtype.
* ``reduction`` says how payloads of several ranks combine: ``"allreduce"`` when the wire
  tensors of all ranks can simply be summed (casts, random-k with a shared seed),
  ``"allgather"`` when each rank's payload must be decoded on its own (int8 with its own
  scale, top-k whose indices differ per rank).
* ``lossy`` decides whether error feedback applies by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass
class Payload:
    """What one rank puts on the wire for one tensor.

    ``tensors`` are the wire tensors, 1-D and contiguous. ``shape``/``dtype`` describe the
    original tensor; ``meta`` holds what every rank can recompute (e.g. random-k's seed) and
    is therefore not sent.
    """

    tensors: tuple[torch.Tensor, ...]
    shape: torch.Size
    dtype: torch.dtype
    kept: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Exact bytes of the wire tensors."""
        return sum(t.numel() * t.element_size() for t in self.tensors)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n


@runtime_checkable
class Compressor(Protocol):
    """Protocol every compressor follows (see module docstring)."""

    name: str
    lossy: bool
    reduction: str  # "allreduce" or "allgather"

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload: ...

    def decompress(self, payload: Payload) -> torch.Tensor: ...


def ratio_to_k(ratio: float, numel: int) -> int:
    """Number of kept elements for a kept fraction; at least one element of a non-empty tensor."""
    if numel == 0:
        return 0
    return max(1, min(numel, int(round(ratio * numel))))


def index_dtype(numel: int) -> torch.dtype:
    """int32 indices whenever they fit: half the wire size of int64."""
    return torch.int32 if numel < 2**31 else torch.int64
