"""Fixed 8-bit quantization with one scale per tensor (per DDP bucket in the hooks).

``q = round(x / s)`` with ``s = max|x| / 127``; the wire holds the int8 codes and the fp32
scale (``numel + 4`` bytes). Ranks have different scales, so int8 payloads cannot be summed
in int8 without overflow or a second round trip to agree on a scale: they are all-gathered
and each rank's codes are decoded with its own scale.
"""

from __future__ import annotations

import torch

from netsenseml.compress.base import Codec, Payload, Wire


class Int8Compressor(Codec):
    """Symmetric linear 8-bit quantizer, per-tensor scale."""

    name = "int8"
    lossy = True
    reduction = "allgather"
    levels = 127

    def __init__(self) -> None:
        self._buf: torch.Tensor | None = None  # the scaled values, reused between calls

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        flat = tensor.reshape(-1)
        n = flat.numel()
        if n:
            lo, hi = torch.aminmax(flat)  # one read pass; abs().max() would allocate |x| first
            amax = torch.maximum(-lo, hi)
        else:
            amax = torch.zeros((), dtype=flat.dtype, device=flat.device)
        scale = (amax.float() / self.levels).clamp_min(torch.finfo(torch.float32).tiny)
        # A reused work buffer and in-place steps: on CPUs a fresh 40 MB tensor per step
        # costs more page faults than the arithmetic on it (as the top-k's buffers).
        buf = self._buf
        if buf is None or (buf.numel(), buf.device) != (n, flat.device):
            buf = self._buf = torch.empty(n, dtype=torch.float32, device=flat.device)
        torch.div(flat, scale, out=buf)
        codes = buf.round_().clamp_(-self.levels, self.levels).to(torch.int8)
        return Payload((codes, scale.reshape(1)), tensor.shape, tensor.dtype, kept=n)

    def decompress(self, payload: Payload) -> torch.Tensor:
        codes, scale = payload.tensors
        out = torch.empty(codes.numel(), dtype=torch.float32, device=codes.device)
        torch.mul(codes, scale, out=out)  # int8 x fp32 into one output: no int8->fp32 copy
        return out.to(payload.dtype).view(payload.shape)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Adds the decoded payload into the flat tensor ``out`` (used to sum many ranks)."""
        codes, scale = payload.tensors
        out.add_(torch.mul(codes, scale.to(out.dtype)))

    def max_nbytes(self, numel: int) -> int:
        """One int8 code per element and the fp32 scale."""
        return numel + 4

    def wire(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        return ((numel, torch.int8), (1, torch.float32)), numel
