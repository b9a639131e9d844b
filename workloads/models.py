"""Models the training worker can run, each with a size knob.

Why three models: they span the gradient sizes and compute/communication ratios the
NetSenseML paper studies, at sizes two to eight emulated workers can train on two CPU cores.

- ``mlp``: a three-layer perceptron. Its hidden ``width`` sets the gradient size almost
  alone (params ~ width**2), so it is the knob for "how much must cross the network per
  step" with little compute: width 480 is ~1 MB of fp32 gradient, 3500 is ~50 MB
  (see :func:`mlp_width_for_grad_mb`). Default 1024 (~4.6 MB on 8x8 digits).
- ``resnet18``: the paper's ResNet-18, CIFAR-style (3x3 stem, no max-pool, four stages of
  two BasicBlocks, strides 1/2/2/2, global average pool). ``width`` is the first stage's
  channel count: 64 is the real ResNet-18 (11.2 M params, 44.7 MB of gradient); the
  default 32 (2.8 M params, 11.2 MB) keeps a CPU step affordable; tests use 8.
  Adaptive pooling lets it take 8x8 digits as well as 32x32 images.
- ``gpt``: a small GPT-style decoder-only transformer LM (pre-LayerNorm blocks, causal
  self-attention, learned positions, tied input/output embeddings) standing in for the
  paper's GPT-2. Knobs: ``layers`` (default 4), ``d_model`` (default 256, heads =
  d_model // 64 or at least 1), ``context`` (default 64); 3.2 M params (12.8 MB) at the defaults.

BatchNorm in the ResNet: DDP broadcasts buffers from rank 0 each step by default; the
worker keeps that default, so BN running statistics agree across ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

MODELS: tuple[str, ...] = ("mlp", "resnet18", "gpt")

DEFAULT_WIDTH: dict[str, int] = {"mlp": 1024, "resnet18": 32}


@dataclass(frozen=True)
class ModelInfo:
    """What the worker prints and logs about a built model."""

    params: int
    grad_bytes: int  # bytes of fp32 gradient DDP must reduce each step (trainable params)


def model_info(model: nn.Module) -> ModelInfo:
    params = sum(p.numel() for p in model.parameters())
    grad = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return ModelInfo(params=params, grad_bytes=grad)


# --------------------------------------------------------------------------- MLP


class MLP(nn.Module):
    """in -> width -> width -> classes, ReLU. Inputs of any shape are flattened."""

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


def mlp_params(in_features: int, num_classes: int, width: int) -> int:
    return in_features * width + width + width * width + width + width * num_classes + num_classes


def mlp_width_for_grad_mb(grad_mb: float, in_features: int, num_classes: int) -> int:
    """Smallest width whose fp32 gradient is at least ``grad_mb`` MB (1 MB = 1e6 bytes)."""
    target = grad_mb * 1e6 / 4
    a, b = 1.0, in_features + num_classes + 2
    c = num_classes - target
    width = math.ceil((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))
    return max(width, 1)


# --------------------------------------------------------------------------- ResNet-18


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


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18; ``width`` = channels of the first stage (64 = original)."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()
        )
        layers: list[nn.Module] = []
        cin = w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


# --------------------------------------------------------------------------- GPT


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only character LM; forward returns logits of shape (batch, time, vocab)."""

    def __init__(self, vocab: int, context: int = 64, layers: int = 4, d_model: int = 256):
        super().__init__()
        heads = max(1, d_model // 64)
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be divisible by heads={heads}")
        self.context = context
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab, bias=False)
        self.out.weight = self.tok.weight  # weight tying, as GPT-2
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        return self.out(self.ln(self.blocks(x)))


# --------------------------------------------------------------------------- factory


def build_model(
    name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    width: int | None = None,
    layers: int = 4,
    d_model: int = 256,
    context: int = 64,
) -> nn.Module:
    """Build model ``name`` for data of ``input_shape`` (per sample) and ``num_classes``.

    For ``gpt``, ``num_classes`` is the vocabulary size and ``input_shape`` is ignored.
    """
    if name == "mlp":
        return MLP(math.prod(input_shape), num_classes, width or DEFAULT_WIDTH["mlp"])
    if name == "resnet18":
        if len(input_shape) != 3:
            raise ValueError(f"resnet18 needs image input (C,H,W), got shape {input_shape}")
        return ResNet18(input_shape[0], num_classes, width or DEFAULT_WIDTH["resnet18"])
    if name == "gpt":
        return GPT(num_classes, context=context, layers=layers, d_model=d_model)
    raise ValueError(f"model {name!r} unknown; accepted: {', '.join(MODELS)}")
