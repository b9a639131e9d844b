"""``gpt``: a small GPT-style decoder-only character LM standing in for the paper's GPT-2;
``gpt2-small``: GPT-2 small itself.

Pre-LayerNorm blocks, causal self-attention, learned positions, tied input/output embeddings.
Knobs: ``layers`` (default 4), ``d_model`` (default 256, heads = d_model // 64 or at least
1); the context length is the dataset's (``input_shape == (context,)``, the worker's
``--context``, default 64). 3.2 M params (12.8 MB) at the defaults.

``gpt2-small`` (:func:`build_gpt2`) is the same block as GPT-2 (Radford et al. 2019; the
Hugging Face ``GPT2Model`` layout): 12 layers, d_model 768, 12 heads, vocabulary 50257,
a position table of 1024 (GPT-2's ``n_positions``, whatever context it trains at: the
prototype trained at 128), tanh-approximated GELU, tied embeddings, GPT-2's initialisation
(N(0, 0.02), residual projections scaled by 1/sqrt(2 x layers)). **124,439,808 parameters**
(497.8 MB of fp32 gradient). Initialised, not pretrained: no weights can be fetched here.
Not modelled: dropout (GPT-2's 0.1; it changes no shape, byte or step time on the emulated
accelerator, whose profile holds the compute). ``layers``/``d_model``/``heads``/
``positions`` make a smaller GPT-2 through the same code path (the tests).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.sizes import gpt2_params  # noqa: F401 - counted without torch (workloads.sizes)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, gelu: str = "none") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(approximate=gelu), nn.Linear(4 * d_model, d_model)
        )
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def gpt_heads(d_model: int) -> int:
    return max(1, d_model // 64)


class GPT(nn.Module):
    """Decoder-only character LM; forward returns logits of shape (batch, time, vocab)."""

    def __init__(self, vocab: int, context: int = 64, layers: int = 4, d_model: int = 256,
                 heads: int | None = None, positions: int | None = None,
                 gelu: str = "none", scaled_init: bool = False):
        super().__init__()
        heads = heads or gpt_heads(d_model)
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be a multiple of heads={heads}")
        positions = positions or context
        if positions < context:
            raise ValueError(f"positions={positions} is shorter than the context {context}")
        self.context = context
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(positions, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads, gelu) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab, bias=False)
        self.out.weight = self.tok.weight  # weight tying, as GPT-2
        self.apply(self._init)
        if scaled_init:  # GPT-2: residual projections N(0, 0.02 / sqrt(2 x layers))
            for b in self.blocks:
                for lin in (b.proj, b.mlp[2]):
                    nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2 * layers))

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


def build_gpt(input_shape: tuple[int, ...], num_classes: int, layers: int = 4,
              d_model: int = 256) -> GPT:
    """``num_classes`` is the vocabulary; ``input_shape == (context,)``."""
    return GPT(num_classes, context=input_shape[0], layers=layers, d_model=d_model)


def build_gpt2(input_shape: tuple[int, ...], num_classes: int, layers: int = 12,
               d_model: int = 768, heads: int = 12, positions: int = 1024) -> GPT:
    """GPT-2 small at the defaults (module doc); ``num_classes`` is the vocabulary (50257
    for GPT-2's tokens), ``input_shape == (context,)``."""
    return GPT(num_classes, context=input_shape[0], layers=layers, d_model=d_model,
               heads=heads, positions=positions, gelu="tanh", scaled_init=True)
