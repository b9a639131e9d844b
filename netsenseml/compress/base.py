"""The compressor protocol shared by every family, and the payload that goes on the wire.

A compressor turns a tensor into a :class:`Payload` (the tensors handed to
``torch.distributed``) and back. Keeping the protocol this small is what lets the hooks
treat every method the same way (GRACE's split of compressor / memory / communicator):

* ``compress(tensor, seed=None) -> Payload`` -- ``payload.nbytes`` is the exact number of
  bytes of the wire tensors; nothing else (shape, dtype, seeds) is counted because every
  rank knows it already.
* ``decompress(payload) -> Tensor`` -- a dense tensor of the original shape and dtype.
* ``accumulate(payload, out)`` -- adds the decoded payload into the flat tensor ``out``.
* ``reduction`` says how payloads of several ranks combine: ``"allreduce"`` when the wire
  tensors of all ranks can simply be summed (casts, random-k with a shared seed): the hooks
  sum ``payload.tensors[0]`` over ranks and decode the sum with ``accumulate`` into the
  zeroed bucket (so an allreduce compressor sends exactly one wire tensor);
  ``"allgather"`` when each rank's payload must be decoded on its own (int8 with its own
  scale, top-k whose indices differ per rank): each rank's payload goes through
  ``accumulate``.
* ``lossy`` decides whether error feedback applies: the hooks keep a residual for every
  compressor that declares ``lossy = True`` (unless the user turns error feedback off).

Optional members, declared with their defaults on :class:`Codec` (the built-ins' base
class) and read directly; a plug-in class that follows the protocol without deriving from
:class:`Codec` gets the defaults it lacks once, where it is built (:func:`declare`):

* ``dense = True`` -- the single wire tensor is the flattened input in another dtype; the
  summed result is copied into the bucket (a cast copy is ~15x faster than zero + add).
* ``max_nbytes(numel) -> int`` -- an upper bound of ``payload.nbytes`` that every rank
  computes alike; all-gathers then pad to it instead of exchanging sizes first.
* ``memory = "momentum"`` -- DGC's momentum correction instead of the plain residual.
* ``wire(numel, dtype, seed=None) -> (Wire, kept)`` -- the sizes and dtypes of the wire
  tensors ``compress`` returns for a flat tensor of ``numel`` elements of ``dtype`` (one
  ``(numel, dtype)`` pair per tensor, in order) and the elements it keeps, computed without
  compressing. Payload mode (``netsenseml.payload``) sends zeros of exactly these sizes
  instead of running the codec; a compressor whose sizes depend on the values gives the
  largest (its all-gathers are padded to ``max_nbytes`` anyway). Every built-in has it.
* ``arg = "ratio"`` / ``"rank"`` -- how ``pkg.mod:Class:ARG`` is parsed (see
  ``netsenseml.methods.ARG_KINDS``); without it a plug-in receives ``ARG`` as text.
* ``ratio`` -- the kept fraction of a sparse codec (the adaptive methods set it each
  step); None for the dense codecs, which may drain an error-feedback residual.
* ``exact = True`` -- the decoded payload is the input bit for bit (the fp32 identity):
  a fully drained residual is dropped (``netsenseml.memory``).
* ``accumulate`` -- by default ``out += decompress(payload)``.

A new compressor is one module plus one ``register(...)`` line in ``netsenseml.methods``;
a user's compressor needs no registration at all (``netsenseml/PLUGINS.md``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

#: The wire tensors of one payload without their values: ``(numel, dtype)`` per tensor.
Wire = tuple[tuple[int, torch.dtype], ...]


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

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        """``seed`` is equal on all ranks for a given step and bucket (random-k uses it)."""
        ...

    def decompress(self, payload: Payload) -> torch.Tensor: ...

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Adds the decoded ``payload`` into the flat ``out`` (a sum over ranks for allreduce)."""
        ...


class Codec:
    """The compressors' base class: the protocol's optional members declared with their
    defaults (module docstring), so that the hooks read them directly. A subclass sets
    ``name``, ``lossy``, ``reduction`` and defines ``compress`` / ``decompress``."""

    name: str
    lossy: bool
    reduction: str
    dense: bool = False
    exact: bool = False
    ratio: float | None = None
    memory: str = "residual"
    arg: str | None = None
    #: ``max_nbytes(numel) -> int`` where a codec has a byte bound, else None
    max_nbytes: Callable[[int], int] | None = None
    #: ``wire(numel, dtype, seed=None) -> (Wire, kept)`` where a codec knows its sizes, else None
    wire: Callable[..., tuple[Wire, int]] | None = None

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        raise NotImplementedError

    def decompress(self, payload: Payload) -> torch.Tensor:
        raise NotImplementedError

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Adds the decoded ``payload`` into the flat ``out``."""
        out.add_(self.decompress(payload).reshape(-1).to(out.dtype))


#: The optional members and their defaults (:class:`Codec`'s).
OPTIONAL: dict[str, Any] = {m: vars(Codec)[m] for m in
                            ("dense", "exact", "ratio", "memory", "arg", "max_nbytes", "wire")}


def declare(codec: Any) -> Any:
    """``codec`` with every optional member (returned): a :class:`Codec` has them; an
    instance of a plug-in class that follows the protocol without deriving from it gets the
    defaults it lacks, set on it once where it enters (built, or wrapped for payload mode)."""
    if isinstance(codec, Codec):
        return codec
    for member, default in OPTIONAL.items():
        if not hasattr(codec, member):
            setattr(codec, member, default)
    if not callable(getattr(codec, "accumulate", None)):
        codec.accumulate = types.MethodType(Codec.accumulate, codec)
    return codec


def ratio_to_k(ratio: float, numel: int) -> int:
    """Number of kept elements for a kept fraction; at least one element of a non-empty tensor."""
    if numel == 0:
        return 0
    return max(1, min(numel, int(round(ratio * numel))))


def index_dtype(numel: int) -> torch.dtype:
    """int32 indices whenever they fit: half the wire size of int64."""
    return torch.int32 if numel < 2**31 else torch.int64
