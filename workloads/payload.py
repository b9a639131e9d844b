"""Payload mode (``--grads payload``): throughput runs that send each method's real bytes
with no model, no gradient and no codec on the host.

Why: ``netsenseml.payload`` says why a throughput run needs sizes and times, not values.
What is left of the worker is DDP's part of a step, and this module plays it:

* **The bucket layout** is DDP's, computed from the model's parameter shapes, not its
  values: the model is built on torch's ``meta`` device (no memory, so VGG-16 and GPT-2
  small fit 8 ranks on one host), one backward on meta tensors gives the order in which
  the gradients become ready (post-accumulate-grad hooks, as DDP's reducer sees them),
  and torch's own ``dist._compute_bucket_assignment_by_size`` groups them under DDP's
  limits (1 MiB for the first bucket, then 25 MiB), as DDP's rebuild after its first step
  does. DDP's first step runs with all parameters in one bucket (torch >= 2.x without
  ``find_unused_parameters``); so does this one. ``tests/workloads/test_payload.py``
  holds the layout equal to real DDP's for the paper's three models.
* **A step** is what DDP's reducer does around the hook: each bucket, in order, is handed
  to the method's hook (``netsenseml.hooks.build``), whose pacer holds it until its
  profiled release time (forward + its share of the backward + the codec time of the
  buckets before it) and which launches its collectives; then every bucket's future is
  waited for (the end of the backward). The worker's pacer holds the forward and the
  optimizer to the profile as in every run.
* **Memory**: one flat fp32 buffer of the gradient's size per rank, never written (its
  pages stay unmapped); bucket ``i``'s buffer is a view of it. The wire tensors are the
  codecs' (``PayloadCodec``: zeros of their real sizes, reused).

The run folder says ``grads: payload`` (config.json's workload, every start record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from workloads.recorded_gradient import ready_order

#: DDP's default bucket limits (``torch.nn.parallel.distributed``): the first bucket of a
#: rebuilt layout closes at 1 MiB, every later one at 25 MiB.
FIRST_BUCKET_BYTES = dist._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class Layout:
    """DDP's buckets of one model: ``shapes`` of its trainable parameters (declaration
    order), ``ready`` the order their gradients become ready, ``buckets`` the parameter
    indices of each rebuilt bucket in firing order (each bucket's parameters in the order
    DDP lays them out in the bucket's buffer)."""

    shapes: tuple[torch.Size, ...]
    ready: tuple[int, ...]
    buckets: tuple[tuple[int, ...], ...]

    @property
    def elements(self) -> int:
        return sum(_numel(s) for s in self.shapes)

    def bucket_elements(self) -> list[int]:
        return [sum(_numel(self.shapes[i]) for i in b) for b in self.buckets]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def layout(model: nn.Module, example: Callable[[nn.Module], torch.Tensor]) -> Layout:
    """DDP's rebuilt bucket layout for ``model`` (module docstring). ``model`` should live
    on the meta device; ``example(model)`` returns a scalar loss of one forward (meta
    tensors: nothing is computed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        ready = ready_order(params, lambda: example(model).backward())
    finally:
        for p in params:
            p.grad = None
    buckets, _limits = dist._compute_bucket_assignment_by_size(
        [params[i] for i in ready], [FIRST_BUCKET_BYTES, BUCKET_BYTES], [], ready)
    return Layout(tuple(p.shape for p in params), tuple(ready),
                  tuple(tuple(int(i) for i in b) for b in buckets))


class Bucket:
    """What a comm hook reads of DDP's ``GradBucket`` (which has no Python constructor):
    index, flat buffer, last or not, the per-parameter gradient views, the parameters."""

    def __init__(self, index: int, buffer: torch.Tensor, last: bool,
                 shapes: Sequence[torch.Size], params: Sequence[Any] = ()) -> None:
        self._index, self._buffer, self._last = index, buffer, last
        self._shapes, self._params = list(shapes), list(params)

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def is_last(self) -> bool:
        return self._last

    def gradients(self) -> list[torch.Tensor]:
        out, off = [], 0
        for shape in self._shapes:
            n = _numel(shape)
            out.append(self._buffer[off:off + n].view(shape))
            off += n
        return out

    def parameters(self) -> list[Any]:
        return self._params


class PayloadSteps:
    """DDP's part of a step in payload mode (module docstring): the buckets of the first
    step (one, as DDP's) and of the later ones (the rebuilt layout), handed to ``hook``."""

    def __init__(self, lay: Layout, state: Any, hook: Callable[[Any, Any], torch.futures.Future],
                 device: torch.device) -> None:
        self.layout, self.state, self.hook = lay, state, hook
        flat = torch.empty(lay.elements, dtype=torch.float32, device=device)  # never written
        self.first = [Bucket(0, flat, True, list(lay.shapes))]  # DDP: declaration order
        self.rebuilt, off = [], 0
        for i, b in enumerate(lay.buckets):
            n = sum(_numel(lay.shapes[j]) for j in b)
            self.rebuilt.append(Bucket(i, flat[off:off + n], i == len(lay.buckets) - 1,
                                       [lay.shapes[j] for j in b]))
            off += n
        self.steps = 0

    def backward(self) -> None:
        """Every bucket to the hook in order (each held by the pacer to its release time),
        then every collective waited for: the backward pass's end."""
        buckets = self.first if self.steps == 0 else self.rebuilt
        self.steps += 1
        futures = [self.hook(self.state, b) for b in buckets]
        torch.futures.wait_all(futures)
