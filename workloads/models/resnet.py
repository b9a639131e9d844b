"""``resnet18``: the paper's ResNet-18, CIFAR-style, with a channel-width knob.

3x3 stem, no max-pool, four stages of two BasicBlocks, strides 1/2/2/2, global average
pool. ``width`` is the first stage's channel count: 64 is the real ResNet-18 (11.2 M params,
44.7 MB of gradient); the default 32 (2.8 M params, 11.2 MB) keeps a CPU step affordable;
tests use 8. Adaptive pooling lets it take 8x8 digits as well as 32x32 images.

BatchNorm: DDP broadcasts buffers from rank 0 each step by default; the worker keeps that
default, so BN running statistics agree across ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class _CifarResNet(nn.Module):
    """A 3x3 stem, BasicBlocks as ``blocks`` says ((channels, stride) each, in order),
    global average pool, a linear head: what ResNet-18 and ResNet-20 share."""

    def __init__(self, in_channels: int, num_classes: int, width: int,
                 blocks: list[tuple[int, int]]) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        layers: list[nn.Module] = []
        cin = width
        for cout, stride in blocks:
            layers.append(BasicBlock(cin, cout, stride))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def _image_channels(name: str, input_shape: tuple[int, ...]) -> int:
    if len(input_shape) != 3:
        raise ValueError(f"{name} needs image input (C,H,W), got shape {input_shape}")
    return input_shape[0]


class ResNet18(_CifarResNet):
    """CIFAR-style ResNet-18; ``width`` = channels of the first stage (64 = original)."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        w = width
        blocks = [(c, s) for i, c in enumerate((w, 2 * w, 4 * w, 8 * w))
                  for s in ((1 if i == 0 else 2), 1)]
        super().__init__(in_channels, num_classes, w, blocks)


def build_resnet18(input_shape: tuple[int, ...], num_classes: int, width: int = 32) -> ResNet18:
    return ResNet18(_image_channels("resnet18", input_shape), num_classes, width)


class ResNet20(_CifarResNet):
    """CIFAR ResNet-20 (He et al. 2016, section 4.2): a 3x3 stem, three stages of three
    BasicBlocks at ``width``, 2x and 4x channels (16/32/64 in the original), strides 1/2/2,
    global average pool. 0.27 M parameters (1.1 MB of fp32 gradient) at width 16 but ~41
    MFLOPs per 32x32 image: compute-heavy for its gradient, the opposite of the MLP, so on
    an idle link its step is compute and its crossover lies at a low rate."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 16) -> None:
        w = width
        blocks = [(c, 2 if (i > 0 and j == 0) else 1) for i, c in enumerate((w, 2 * w, 4 * w))
                  for j in range(3)]
        super().__init__(in_channels, num_classes, w, blocks)


def build_resnet20(input_shape: tuple[int, ...], num_classes: int, width: int = 16) -> ResNet20:
    return ResNet20(_image_channels("resnet20", input_shape), num_classes, width)
