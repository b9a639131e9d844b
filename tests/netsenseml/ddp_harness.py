"""A small DDP model for hook tests on loopback gloo: its two buckets, each rank's batches,
the gradients after a backward, and a spy on the collectives a hook launches.

``two_bucket_model`` is 1.2 MB in its middle layer: with DDP's 1 MB first-bucket cap it has
two buckets, so bucket ordering, piggy-backing on bucket 0 and residual re-layout are
exercised.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

STEPS = 4


def two_bucket_model() -> torch.nn.Module:
    # Linear(600, 500) is 1.2 MB: with DDP's 1 MB first-bucket cap this gives two buckets,
    # so bucket ordering, piggy-backing on bucket 0 and residual re-layout are exercised.
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(20, 600),
        torch.nn.Tanh(),
        torch.nn.Linear(600, 500),
        torch.nn.Tanh(),
        torch.nn.Linear(500, 4),
    )


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 20, generator=g), torch.randint(4, (8,), generator=g)


def backward(model: torch.nn.Module, rank: int, step: int) -> None:
    x, y = batch(rank, step)
    model.zero_grad(set_to_none=False)
    torch.nn.functional.cross_entropy(model(x), y).backward()


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


class CollectiveSpy:
    """Counts the bytes of the input tensors handed to dist.all_reduce / dist.all_gather."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls: dict[str, int] = {"all_reduce": 0, "all_gather": 0}
        self._lock = threading.Lock()
        self._orig = (dist.all_reduce, dist.all_gather)

    def _count(self, name: str, t: torch.Tensor) -> None:
        with self._lock:
            self.bytes += t.numel() * t.element_size()
            self.calls[name] += 1

    def __enter__(self) -> CollectiveSpy:
        orig_ar, orig_ag = self._orig

        def all_reduce(tensor, *a, **k):
            self._count("all_reduce", tensor)
            return orig_ar(tensor, *a, **k)

        def all_gather(out, tensor, *a, **k):
            self._count("all_gather", tensor)
            return orig_ag(out, tensor, *a, **k)

        dist.all_reduce, dist.all_gather = all_reduce, all_gather
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce, dist.all_gather = self._orig

    def pop(self) -> int:
        with self._lock:
            b, self.bytes = self.bytes, 0
        return b
