"""A compressor plug-in whose ``compress`` never returns from its third call on: user code
that hangs inside the hook (``NetSenseState.user_code``), for the worker's watchdog test."""

from __future__ import annotations

import time

from netsenseml.compress.base import Payload


class HangAt3:
    name = "hangat3"
    lossy = False
    reduction = "allreduce"
    dense = True

    def __init__(self) -> None:
        self.calls = 0

    def compress(self, tensor, seed=None):
        self.calls += 1
        if self.calls >= 3:
            time.sleep(3600)  # the bug: never returns
        flat = tensor.reshape(-1).clone()
        return Payload((flat,), tensor.shape, tensor.dtype, kept=flat.numel())

    def decompress(self, payload):
        return payload.tensors[0].view(payload.shape)

    def accumulate(self, payload, out):
        out.add_(payload.tensors[0].to(out.dtype))
