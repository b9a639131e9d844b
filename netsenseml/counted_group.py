"""A process group that counts every collective a comm hook issues on it, then forwards it.

A raw DDP comm hook (torch's ``fp16_compress_hook``, ``powerSGD_hook``, a user's function)
talks to ``torch.distributed`` itself, so its bytes cannot be taken from the hook's word.
Every ``torch.distributed`` collective ends in a method call on the group object
(``dist.all_reduce(t, group=g)`` -> ``g.allreduce([t], opts)``), whichever thread issues it
(PowerSGD launches its P and Q allreduces from completion callbacks) and however the hook
imported the function. :class:`CountedGroup` is a Python ``ProcessGroup`` whose collective
methods count the input tensors into a :class:`~netsenseml.comm.CommRecorder` (bytes at
launch, busy time until the work's future completes) and forward to the real group. No
new communicator is created: the collectives run on the wrapped group, in the order issued.

The wrapper is created through torch's third-party backend hook
(``dist.Backend.register_backend`` + ``dist.new_group``), so it is registered like any
group: ``dist.get_rank(g)``, ``dist.barrier(group=g)``, ``all_gather_object`` work on it.
``new_group`` is collective over the default group: every rank must create the wrapper in
the same order (``hooks.register`` is called on every rank, as DDP's constructor is).
A collective not listed in :data:`INPUT_ARG` reaches torch's base class, which has no
backend, and fails loudly rather than going uncounted.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

from netsenseml.comm import CommRecorder

BACKEND = "netsense_counted"

#: Collective method of ``ProcessGroup`` -> position of its input argument (the tensors
#: this rank hands over; None: nothing, e.g. recv or barrier). Counted as in
#: ``netsenseml.comm``: all-reduce's tensor, all-gather's input, send's tensor.
INPUT_ARG: dict[str, int | None] = {
    "allreduce": 0,
    "allreduce_coalesced": 0,
    "reduce": 0,
    "broadcast": 0,
    "send": 0,
    "allgather": 1,
    "_allgather_base": 1,
    "all_gather_single": 1,
    "allgather_coalesced": 1,
    "allgather_into_tensor_coalesced": 1,
    "all_gather_single_coalesced": 1,
    "gather": 1,
    "scatter": 1,
    "reduce_scatter": 1,
    "_reduce_scatter_base": 1,
    "reduce_scatter_single": 1,
    "reduce_scatter_single_coalesced": 1,
    "reduce_scatter_tensor_coalesced": 1,
    "alltoall": 1,
    "alltoall_base": 1,
    "all_to_all_single": 1,
    "recv": None,
    "recv_anysource": None,
    "barrier": None,
    "monitored_barrier": None,
}


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


class CountedGroup(dist.ProcessGroup):
    """Forwards every collective to ``inner`` after counting it into ``recorder``."""

    def __init__(self, inner: dist.ProcessGroup, recorder: CommRecorder) -> None:
        super().__init__(inner.rank(), inner.size())
        self.inner = inner
        self.recorder = recorder

    def _forward(self, name: str, pos: int | None, args: tuple, kwargs: dict) -> Any:
        nbytes = _nbytes(args[pos]) if pos is not None and pos < len(args) else 0
        token = self.recorder.launch(nbytes)
        try:
            work = getattr(self.inner, name)(*args, **kwargs)
        except BaseException:
            self.recorder.done(token)
            raise
        try:
            fut = work.get_future() if work is not None else None
        except RuntimeError:  # a backend without futures for this work: count launch only
            fut = None
        if fut is None:
            self.recorder.done(token)
        else:
            fut.add_done_callback(lambda _f: self.recorder.done(token))
        return work

    # Group-level plumbing that is not a collective goes to the real group unchanged.
    def _get_backend(self, device: Any) -> Any:
        return self.inner._get_backend(device)

    def _start_coalescing(self, device: Any) -> Any:
        return self.inner._start_coalescing(device)

    def _end_coalescing(self, device: Any) -> Any:
        return self.inner._end_coalescing(device)


def _forwarder(name: str, pos: int | None) -> Any:
    def method(self: CountedGroup, *args: Any, **kwargs: Any) -> Any:
        return self._forward(name, pos, args, kwargs)

    method.__name__ = name
    method.__doc__ = f"Counts, then ``inner.{name}(...)``."
    return method


for _name, _pos in INPUT_ARG.items():
    setattr(CountedGroup, _name, _forwarder(_name, _pos))

_lock = threading.Lock()
_pending: list[CountedGroup] = []


def _create(store: Any, rank: int, size: int, timeout: Any) -> CountedGroup:
    """Backend creator called by ``dist.new_group``: hands over the wrapper made just before."""
    return _pending.pop()


def counted_group(process_group: dist.ProcessGroup | None, recorder: CommRecorder) -> CountedGroup:
    """A registered :class:`CountedGroup` over ``process_group`` (None: the default group)."""
    inner = process_group if process_group is not None else dist.group.WORLD
    with _lock:
        if not hasattr(dist.Backend, BACKEND.upper()):
            dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
        _pending.append(CountedGroup(inner, recorder))
        try:
            group = dist.new_group(dist.get_process_group_ranks(inner), backend=BACKEND)
        finally:
            _pending.clear()
    assert isinstance(group, CountedGroup)
    return group
