"""``gpt``: a small GPT-style decoder-only character LM standing in for the paper's GPT-2.

Pre-LayerNorm blocks, causal self-attention, learned positions, tied input/output embeddings.
Knobs: ``layers`` (default 4), ``d_model`` (default 256, heads = d_model // 64 or at least
1); the context length is the dataset's (``input_shape == (context,)``, the worker's
``--context``, default 64). 3.2 M params (12.8 MB) at the defaults.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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


def gpt_heads(d_model: int) -> int:
    return max(1, d_model // 64)


class GPT(nn.Module):
    """Decoder-only character LM; forward returns logits of shape (batch, time, vocab)."""

    def __init__(self, vocab: int, context: int = 64, layers: int = 4, d_model: int = 256):
        super().__init__()
        heads = gpt_heads(d_model)
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be a multiple of 64 or below 128")
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


def build_gpt(input_shape: tuple[int, ...], num_classes: int, layers: int = 4,
              d_model: int = 256) -> GPT:
    """``num_classes`` is the vocabulary; ``input_shape == (context,)``."""
    return GPT(num_classes, context=input_shape[0], layers=layers, d_model=d_model)
