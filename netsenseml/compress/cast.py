"""Dense casts: no compression (fp32 as is) and the half-precision casts fp16 / bf16.

Casts are summable on the wire, so they allreduce, and ``dense``: the hooks copy the summed
wire tensor straight into the bucket. They are treated as lossless for error feedback so
that ``fp16`` matches torch's own ``fp16_compress_hook`` bit for bit.
"""

from __future__ import annotations

import torch

from netsenseml.compress.base import Codec, Payload, Wire


class NoCompression(Codec):
    """Sends the tensor unchanged (the fp32 baseline)."""

    name = "none"
    lossy = False
    reduction = "allreduce"
    dense = True
    exact = True  # the decoded payload is the input, bit for bit (netsenseml.memory)

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        flat = tensor.reshape(-1)
        return Payload((flat,), tensor.shape, tensor.dtype, kept=flat.numel())

    def wire(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        return ((numel, dtype),), numel

    def decompress(self, payload: Payload) -> torch.Tensor:
        return payload.tensors[0].to(payload.dtype).view(payload.shape)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        out.add_(payload.tensors[0].to(out.dtype))


class CastCompressor(Codec):
    """Casts to a narrower float type (fp16 or bf16) and back."""

    lossy = False
    reduction = "allreduce"
    dense = True

    def __init__(self, wire_dtype: torch.dtype | str) -> None:
        if isinstance(wire_dtype, str):  # the registry names dtypes without importing torch
            wire_dtype = getattr(torch, wire_dtype, wire_dtype)
        if wire_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"cast compressor wire dtype must be float16 or bfloat16, got {wire_dtype}")
        self.wire_dtype = wire_dtype
        self.name = "fp16" if wire_dtype == torch.float16 else "bf16"

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        flat = tensor.reshape(-1).to(self.wire_dtype)
        return Payload((flat,), tensor.shape, tensor.dtype, kept=flat.numel())

    def wire(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        return ((numel, self.wire_dtype),), numel

    def decompress(self, payload: Payload) -> torch.Tensor:
        return payload.tensors[0].to(payload.dtype).view(payload.shape)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        out.add_(payload.tensors[0].to(out.dtype))
