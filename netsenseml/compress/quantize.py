"""Fixed 8-bit quantization with one scale per tensor (per DDP bucket in the hooks).

``q = round(x / s)`` with ``s = max|x| / 127``; the wire holds the int8 codes and the fp32
scale (``numel + 4`` bytes). Ranks have different scales, so int8 payloads cannot be summed
in int8 without overflow or a second round trip to agree on a scale: they are all-gathered
and each rank's codes are decoded with its own scale.
"""

from __future__ import annotations

import torch

from netsenseml.compress.base import Payload


class Int8Compressor:
    """Symmetric linear 8-bit quantizer, per-tensor scale."""

    name = "int8"
    lossy = True
    reduction = "allgather"
    levels = 127

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        flat = tensor.reshape(-1)
        amax = flat.abs().max() if flat.numel() else torch.zeros((), dtype=flat.dtype, device=flat.device)
        scale = (amax.float() / self.levels).clamp_min(torch.finfo(torch.float32).tiny)
        codes = torch.round(flat.float() / scale).clamp_(-self.levels, self.levels).to(torch.int8)
        return Payload((codes, scale.reshape(1)), tensor.shape, tensor.dtype, kept=flat.numel())

    def decompress(self, payload: Payload) -> torch.Tensor:
        codes, scale = payload.tensors
        return (codes.float() * scale).to(payload.dtype).view(payload.shape)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Adds the decoded payload into the flat tensor ``out`` (used to sum many ranks)."""
        codes, scale = payload.tensors
        out.add_(codes.to(out.dtype) * scale.to(out.dtype))

    def max_nbytes(self, numel: int) -> int:
        """One int8 code per element and the fp32 scale."""
        return numel + 4
