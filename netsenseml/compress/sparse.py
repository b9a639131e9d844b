"""Sparsifiers: exact top-k, sampled-threshold top-k (Deep Gradient Compression), random-k.

* **Exact top-k** keeps the ``k = round(R * n)`` largest magnitudes found by ``torch.topk``.
  Wire: fp32 values + int32 indices (``8k`` bytes). Indices differ per rank -> all-gather.
* **Sampled top-k** (DGC, Lin et al. 2018): ``torch.topk`` over millions of elements is slow
  on CPUs, so the threshold is estimated from a small random sample: the ``R``-quantile of
  ``|x|`` on ``sample_fraction * n`` sampled elements (slightly lowered by ``oversample`` so
  that the mask rarely selects fewer than ``k``). One pass ``|x| >= thr`` selects about
  ``k`` elements; when more than ``k`` are selected an exact top-k on that small subset trims
  them to ``k``; when the sample was unlucky and far fewer than ``k`` were selected it falls
  back to the exact method. The count can thus differ between ranks (the communicator
  handles that without truncating).
* **Auto** (the adaptive policy's top-k): the sampled selector while it keeps at least
  ``min_mass`` (90 %) of the exact top-k's squared L2 mass, checked on the first call and
  every ``check_every`` calls after (one exact top-k next to it); the exact one where it
  does not. The sampled threshold costs a pass and a small top-k where the exact selection
  of k among millions costs several passes -- at high rates the codec, not the link,
  would otherwise decide the level.
* **Random-k** keeps ``k`` uniformly drawn positions. The positions come from a seed that
  every rank derives the same way, so the values of all ranks line up position by position
  and can be summed with an allreduce; only the values go on the wire (``4k`` bytes).
"""

from __future__ import annotations

import math

import torch

from netsenseml.compress.base import Codec, Payload, Wire, index_dtype, ratio_to_k


class _SparseBase(Codec):
    lossy = True

    def __init__(self, ratio: float) -> None:
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"kept ratio must satisfy 0 < R <= 1, got {ratio}")
        self.ratio = float(ratio)

    def decompress(self, payload: Payload) -> torch.Tensor:
        out = torch.zeros(payload.numel, dtype=payload.dtype, device=payload.tensors[0].device)
        self.accumulate(payload, out)
        return out.view(payload.shape)

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        """Adds the decoded payload into the flat tensor ``out`` (used to sum many ranks)."""
        values, indices = payload.tensors
        out.index_add_(0, indices.long(), values.to(out.dtype))


class TopKCompressor(_SparseBase):
    """Top-k by magnitude; ``method`` is ``"exact"`` (torch.topk) or ``"sampled"`` (DGC)."""

    reduction = "allgather"

    def __init__(
        self,
        ratio: float,
        method: str = "exact",
        sample_fraction: float = 0.005,
        min_samples: int = 16384,
        oversample: float = 1.1,
        exact_above_ratio: float = 0.2,
        min_mass: float = 0.9,
        check_every: int = 50,
    ) -> None:
        super().__init__(ratio)
        if method not in ("exact", "sampled", "auto"):
            raise ValueError(f"top-k method must be 'exact', 'sampled' or 'auto', got {method!r}")
        if not 0 < min_mass <= 1 or check_every < 1:
            raise ValueError(f"need 0 < min_mass <= 1 and check_every >= 1, got {min_mass}, {check_every}")
        self.method = method
        self.name = "topk" if method == "exact" else f"topk-{method}"
        self.min_mass = min_mass
        self.check_every = check_every
        self.mass_ratio: float | None = None  # auto: the last check's sampled / exact mass
        self._use_sampled = True
        self._calls = 0
        self.sample_fraction = sample_fraction
        self.min_samples = min_samples
        self.oversample = oversample
        self.exact_above_ratio = exact_above_ratio
        self._gen = torch.Generator().manual_seed(0x5EED)
        self._abs_buf: torch.Tensor | None = None
        self._mask_buf: torch.Tensor | None = None

    def select(self, flat: torch.Tensor, k: int) -> torch.Tensor:
        """Indices (int64) of about ``k`` largest magnitudes of the 1-D tensor ``flat``."""
        if self.method != "auto":
            return self._select(flat, k, self.method)
        check = self._calls % self.check_every == 0
        self._calls += 1
        if not check:
            return self._select(flat, k, "sampled" if self._use_sampled else "exact")
        exact = self._select(flat, k, "exact")
        sampled = self._select(flat, k, "sampled")
        m_exact = float(flat[exact].double().pow(2).sum())
        m_sampled = float(flat[sampled].double().pow(2).sum())
        self.mass_ratio = m_sampled / m_exact if m_exact > 0 else 1.0
        self._use_sampled = self.mass_ratio >= self.min_mass
        return sampled if self._use_sampled else exact

    def _select(self, flat: torch.Tensor, k: int, method: str) -> torch.Tensor:
        n = flat.numel()
        if method == "sampled" and n > 4 * self.min_samples:
            # Reused work buffers: on CPUs a fresh 40 MB tensor costs more page faults than
            # the arithmetic on it, which would eat the sampled method's advantage.
            buf = self._abs_buf
            if buf is None or (buf.numel(), buf.dtype, buf.device) != (n, flat.dtype, flat.device):
                self._abs_buf = torch.empty(n, dtype=flat.dtype, device=flat.device)
                self._mask_buf = torch.empty(n, dtype=torch.bool, device=flat.device)
            absx = torch.abs(flat, out=self._abs_buf)
        else:
            absx = flat.abs()
        if (
            method == "exact"
            or k >= n * self.exact_above_ratio
            or n <= 4 * self.min_samples
        ):
            return torch.topk(absx, k, sorted=False).indices
        s = min(n, max(self.min_samples, int(n * self.sample_fraction)))
        sample = absx[torch.randint(n, (s,), generator=self._gen).to(flat.device)]
        ks = min(s, max(1, math.ceil(s * (k / n) * self.oversample)))
        thr = torch.topk(sample, ks, sorted=False).values.min()
        idx = torch.nonzero(torch.ge(absx, thr, out=self._mask_buf)).view(-1)
        if idx.numel() > k:
            idx = idx[torch.topk(absx[idx], k, sorted=False).indices]
        elif idx.numel() < k // 2:
            idx = torch.topk(absx, k, sorted=False).indices
        return idx

    def max_nbytes(self, numel: int) -> int:
        """Both variants keep at most k elements: fp32 value + int32/int64 index each."""
        return ratio_to_k(self.ratio, numel) * (4 + index_dtype(numel).itemsize)

    def wire(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        """The exact selector keeps k; the sampled one at most k (its all-gather pads to k)."""
        k = ratio_to_k(self.ratio, numel)
        return ((k, dtype), (k, index_dtype(numel))), k

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        flat = tensor.reshape(-1)
        k = ratio_to_k(self.ratio, flat.numel())
        idx = self.select(flat, k) if k else torch.zeros(0, dtype=torch.long, device=flat.device)
        values = flat[idx]
        return Payload(
            (values, idx.to(index_dtype(flat.numel()))), tensor.shape, tensor.dtype, kept=idx.numel()
        )


class RandomKCompressor(_SparseBase):
    """Random-k with positions drawn from a seed shared by all ranks (allreduce-able)."""

    name = "randomk"
    reduction = "allreduce"

    def __init__(self, ratio: float, seed: int = 0) -> None:
        super().__init__(ratio)
        self.seed = seed
        self._calls = 0

    def indices(self, numel: int, seed: int) -> torch.Tensor:
        k = ratio_to_k(self.ratio, numel)
        gen = torch.Generator().manual_seed(seed)
        if k == numel:
            return torch.arange(numel)
        # Sorted unique positions: sorting keeps memory access linear; duplicates are rare
        # for small R and removing them makes the kept count exact for the EF residual.
        return torch.unique(torch.randint(numel, (k,), generator=gen))

    def compress(self, tensor: torch.Tensor, seed: int | None = None) -> Payload:
        """``seed`` must be equal on all ranks; without it a per-compressor call counter is used."""
        if seed is None:
            seed = self.seed * 1_000_003 + self._calls
            self._calls += 1
        flat = tensor.reshape(-1)
        idx = self.indices(flat.numel(), seed).to(flat.device)
        return Payload((flat[idx],), tensor.shape, tensor.dtype, kept=idx.numel(), meta={"indices": idx})

    def accumulate(self, payload: Payload, out: torch.Tensor) -> None:
        out.index_add_(0, payload.meta["indices"], payload.tensors[0].to(out.dtype))

    def wire(self, numel: int, dtype: torch.dtype, seed: int | None = None) -> tuple[Wire, int]:
        """The positions are drawn (cheap next to the values' gather) for the exact count:
        duplicates removed, as ``compress`` does."""
        if seed is None:
            seed = self.seed * 1_000_003 + self._calls
            self._calls += 1
        kept = int(self.indices(numel, seed).numel())
        return ((kept, dtype),), kept
