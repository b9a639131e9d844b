"""The recorded-gradient mode (``--grads recorded``): throughput runs without the host's backward.

Why: under the emulated accelerator (``netsenseml.accelerator``) a step's compute is held to
a profile, so for throughput the host's forward and backward only have to produce the
gradient the hook sends. At the paper's sizes they cannot do that in a dilatable time on a
2-core host (VGG-16 at 224 px, batch 32: tens of seconds a step per worker), yet what a
throughput run measures -- bytes, codecs, collectives, the policy -- depends on the
gradient's shapes and values, not on its being new each step.

So the worker computes **one real gradient** before training (its own batch, forward and
backward through ``DDP.no_sync``: local, nothing sent, nothing paced), keeps it, and every
step hands DDP that recorded gradient through the normal autograd/hook path: the module's
forward is replaced by a surrogate loss ``sum_p dot(p, g_p)`` (``g_p`` the recorded
gradient of parameter ``p``, detached), whose gradient with respect to ``p`` is exactly
``g_p`` (1.0 x g_p, bit for bit). ``DDP(...)()`` then runs DDP's forward
(``prepare_for_backward``) and ``loss.backward()`` fires DDP's per-parameter hooks, so the
buckets, the comm hook, the codecs and the collectives are the real ones and the pacer
releases each bucket at its profiled time, as in a real step. DDP is built without its
per-forward broadcast of the module's buffers (BatchNorm's running statistics): the
surrogate never updates them, and the broadcast, a collective over the emulated network
inside the forward's slot, would be the network's time counted as the host's lateness.

The surrogate adds the parameters' terms in the reverse of the order their gradients were
ready in the real backward (recorded with post-accumulate-grad hooks): autograd runs the
term added last first, so the gradients arrive in the real order and DDP rebuilds its
buckets (after the first synced step) as a real run does -- the same buckets, so the same
bytes per bucket (``tests/workloads/test_recorded_gradient.py``: a recorded step's ``bytes_sent``
equals a real step's, per method).

Cost on the host per step: one dot product per parameter (forward) and one multiply-write
per element (backward), ~2-3 passes over the gradient (``benchmarks/paper_models.py``
prints it per model). The parameters do not change (the worker skips the optimizer step:
the pacer still holds its profiled time), so the model's accuracy is not measured: the
worker refuses evaluation options in this mode, and its records say ``grads: recorded``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

MODES = ("real", "recorded")


class RecordedGrads:
    """One real local gradient per parameter and the order the backward produced them."""

    def __init__(self, params: list[nn.Parameter], grads: list[torch.Tensor],
                 order: list[int], loss: float) -> None:
        self.params, self.grads, self.order, self.loss = params, grads, order, loss

    @property
    def elements(self) -> int:
        return sum(g.numel() for g in self.grads)

    def surrogate(self) -> torch.Tensor:
        """``sum_p dot(p, g_p)``, terms added in the reverse of the real ready order."""
        total: torch.Tensor | None = None
        for i in reversed(self.order):
            term = torch.dot(self.params[i].reshape(-1), self.grads[i].reshape(-1))
            total = term if total is None else total + term
        assert total is not None
        return total


def ready_order(params: list[nn.Parameter], backward: Callable[[], object]) -> list[int]:
    """The indexes of ``params`` in the order their gradients became ready (post-accumulate-
    grad hooks, as DDP's reducer sees them) during ``backward()``, which runs once; the
    unused parameters last, as DDP puts them. The gradients it leaves are the caller's."""
    index = {id(p): i for i, p in enumerate(params)}
    order: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda q: order.append(index[id(q)]))
               for p in params]
    try:
        backward()
    finally:
        for h in handles:
            h.remove()
    seen = set(order)
    return order + [i for i in range(len(params)) if i not in seen]


def record(model: nn.Module, loss_fn: Callable[[], torch.Tensor]) -> RecordedGrads:
    """Runs ``loss_fn`` (the forward through DDP under ``no_sync``, or the bare module) and
    its backward once, and keeps each parameter's gradient and the order they were ready."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    losses: list[torch.Tensor] = []

    def backward() -> None:
        losses.append(loss_fn())
        losses[0].backward()

    order = ready_order(params, backward)
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
             for p in params]
    for p in params:
        p.grad = None
    return RecordedGrads(params, grads, order, float(losses[0].detach()))


def install(module: nn.Module, rec: RecordedGrads) -> None:
    """From now on ``module(...)`` (and DDP's forward around it) returns the surrogate loss."""

    def forward(*_: Any, **__: Any) -> torch.Tensor:
        return rec.surrogate()

    module.forward = forward  # type: ignore[method-assign]
