"""The paper's three models at reduced sizes (same code path as their real sizes), a
deterministic batch per rank and step, their loss, and a few DDP steps of a method with real
or recorded gradients: what the recorded-gradient and payload-mode tests share."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from workloads import recorded_gradient
from workloads.models import build_model

# (model, input shape, classes, knobs): the paper's models at reduced sizes
MODELS = [
    ("resnet18-imagenet", (3, 32, 32), 100, {"width": 8}),
    ("vgg16", (3, 32, 32), 100, {"width": 8, "hidden": 64}),
    ("gpt2-small", (16,), 500, {"layers": 2, "d_model": 64, "heads": 2, "positions": 32}),
]


def batch(shape: tuple[int, ...], classes: int, rank: int, step: int):
    g = torch.Generator().manual_seed(100 * step + rank)
    if len(shape) == 1:  # tokens
        x = torch.randint(classes, (4, *shape), generator=g)
        return x, torch.randint(classes, (4, *shape), generator=g)
    return torch.randn(4, *shape, generator=g), torch.randint(classes, (4,), generator=g)


def loss(model, x, y):
    out = model(x)
    if out.dim() == 3:
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return torch.nn.functional.cross_entropy(out, y)


def ddp_steps(name: str, shape: tuple[int, ...], classes: int, knobs: dict, method: str,
              rank: int, mode: str, steps: int) -> list[dict[str, Any]]:
    """``steps`` steps of ``method``'s hook on real DDP (a process group must exist): each
    step's hook statistics. ``mode``: ``real`` (a batch a step) or ``recorded`` (this rank's
    first batch's gradient, every step: ``workloads.recorded_gradient``)."""
    from netsenseml import hooks

    torch.manual_seed(0)
    ddp = DDP(build_model(name, input_shape=shape, num_classes=classes, **knobs))
    state = hooks.register(ddp, method, seed=0)
    if mode == "recorded":
        x, y = batch(shape, classes, rank, 0)
        with ddp.no_sync():
            rec = recorded_gradient.record(ddp, lambda: loss(ddp, x, y))
        recorded_gradient.install(ddp.module, rec)
    out = []
    for step in range(steps):
        ddp.zero_grad(set_to_none=True)
        step_loss = loss(ddp, *batch(shape, classes, rank, step)) if mode == "real" else ddp()
        step_loss.backward()
        out.append(state.pop_step_stats())
    return out
