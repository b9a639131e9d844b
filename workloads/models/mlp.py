"""``mlp``: a three-layer perceptron whose hidden ``width`` sets the gradient size.

Why: params ~ width**2, so width is the knob for "how much must cross the network per step"
with little compute: on 8x8 digits width 480 is ~1 MB of fp32 gradient, 3500 is ~50 MB
(:func:`mlp_width_for_grad_mb`). On the 256-feature, 300-class ``mixture`` set width 2048 is
5.3 M parameters (21 MB) and width 3072 is 11.2 M (45 MB). Default 1024. Inputs of any shape
are flattened, so it takes images and feature vectors alike.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    """in -> width -> width -> classes, ReLU."""

    def __init__(self, in_features: int, num_classes: int, width: int = 1024) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_mlp(input_shape: tuple[int, ...], num_classes: int, width: int = 1024) -> MLP:
    return MLP(math.prod(input_shape), num_classes, width)


def mlp_params(in_features: int, num_classes: int, width: int) -> int:
    return in_features * width + width + width * width + width + width * num_classes + num_classes


def mlp_width_for_grad_mb(grad_mb: float, in_features: int, num_classes: int) -> int:
    """Smallest width whose fp32 gradient is at least ``grad_mb`` MB (1 MB = 1e6 bytes)."""
    target = grad_mb * 1e6 / 4
    a, b = 1.0, in_features + num_classes + 2
    c = num_classes - target
    width = math.ceil((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))
    return max(width, 1)
