"""Each DDP bucket's accumulated local gradient norm, for a policy that reads it (Accordion).

Accordion (``netsenseml.accordion``) decides from how much the norm of the gradient
*accumulated over an interval* changed between two intervals. A norm of a sum is not a
function of the per-step norms (``||g1 + g2|| != ||g1|| + ||g2||``), so the hook keeps the sum
itself: one tensor per parameter, as the authors' ``main.py`` keeps ``full_rank_accum``
(one fp32 copy of the model's gradient in memory). What it sums is each rank's *local*
gradient, read from the bucket at the start of the hook -- before error feedback and
compression, as Accordion reads the uncompressed gradient -- so the norm does not depend on
the level the policy chose.

Why per parameter and not per flat bucket buffer: DDP rebuilds its buckets after the first
step (another order, other sizes); sums kept per parameter survive that, and a bucket's
norm is taken at the window's end over the parameters it holds then
(``sqrt(sum ||acc_p||^2)``). Every rank holds the same layout, so the per-bucket vectors
line up when the hook averages them over ranks (``netsenseml.loop.to_wire``).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class GradNorms:
    """The local gradient summed per parameter over windows of ``every`` steps.

    The hook calls :meth:`add` with every bucket as it arrives and :meth:`end_step` when
    bucket 0 of the next step opens (before adding it); :meth:`end_step` returns each
    bucket's norm of the window's sum on the step that closes a window (every ``every``-th
    step) and starts the next window, and ``()`` on every other step.
    """

    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"need a window of at least one step, got {every}")
        self.every = every
        self.steps = 0  # steps ended
        self._sums: dict[int, torch.Tensor] = {}  # id(parameter) -> summed local gradient
        self._layout: dict[int, list[int]] = {}  # bucket index -> ids of its parameters
        #: the layout the last closed window's norms were taken over (bucket index -> ids)
        self.last_layout: dict[int, list[int]] = {}

    def add(self, bucket: dist.GradBucket) -> None:
        """Adds one bucket's local gradient (read before the hook changes the buffer)."""
        keys = []
        for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
            key = id(p)
            keys.append(key)
            total = self._sums.get(key)
            if total is None:
                self._sums[key] = g.detach().clone()
            else:
                total.add_(g.detach())
        self._layout[bucket.index()] = keys

    def end_step(self) -> tuple[float, ...]:
        """A step ended: the per-bucket norms (bucket-index order) if it closed a window."""
        self.steps += 1
        layout, self._layout = self._layout, {}
        if self.steps % self.every:
            return ()
        norms = []
        self.last_layout = layout
        for index in sorted(layout):
            sq = sum(float(torch.linalg.vector_norm(self._sums[k], dtype=torch.float64)) ** 2
                     for k in layout[index] if k in self._sums)
            norms.append(math.sqrt(sq))
        self._sums.clear()
        return tuple(norms)
