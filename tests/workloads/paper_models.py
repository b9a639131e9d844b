"""The paper's three models at reduced sizes (same code path as their real sizes), a
deterministic batch per rank and step, and their loss: what the recorded-gradient and
payload-mode tests share."""

from __future__ import annotations

import torch

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
