"""BBR-style network monitor fed by the collectives the training job makes anyway.

Every collective is a sample ``(bytes, seconds)``: the payload this rank handed to
``torch.distributed`` and the time from launch to completion. Like BBR (Cardwell et al.
2016) the monitor keeps two windowed extremes:

* **min RTT** -- the smallest ``seconds`` in the window: the collective least delayed by
  queues and by its own size (tiny collectives such as the 8-byte size exchange of a
  sparse all-gather are natural probes), the best available estimate of the base latency.
* **max delivery rate** -- the largest delivery-rate sample in the window. A collective
  spends about one base latency before its bytes flow, so a sample is
  ``bytes / (seconds - min_rtt)`` (as BBR measures delivery between acknowledgements, not
  including the first round trip), with ``seconds - min_rtt`` floored at
  ``min_transfer_fraction * seconds`` so that a sample barely above the min RTT cannot
  claim an absurd rate (the floor caps the over-estimate at 1/fraction).
  Nothing delivers faster than the bottleneck, so the maximum estimates its bandwidth;
  the window lets it fall when the link slows.

Their product is the **BDP** (bytes the path holds without queueing). The **queueing delay**
estimate of the latest sample is what it took beyond the ideal time at these two
extremes: ``max(0, seconds - min_rtt - bytes / max_rate)``.

Pure Python (no torch) so that it can be unit-tested with synthetic sample streams; pass
``t`` explicitly in tests, ``time.monotonic()`` is used otherwise.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass


class WindowedExtreme:
    """Running max (or min) over a sliding time window, O(1) amortised per sample.

    A monotone deque keeps only candidates that can still become the extreme.
    """

    def __init__(self, window_s: float, mode: str = "max") -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.window_s = window_s
        self._sign = 1.0 if mode == "max" else -1.0
        self._q: deque[tuple[float, float]] = deque()  # (t, signed value), values decreasing

    def add(self, value: float, t: float) -> None:
        v = self._sign * value
        while self._q and self._q[-1][1] <= v:
            self._q.pop()
        self._q.append((t, v))
        self._expire(t)

    def _expire(self, now: float) -> None:
        # Keep the newest sample even when it is older than the window: an estimate that
        # vanishes between samples would be worse than a stale one.
        while len(self._q) > 1 and self._q[0][0] < now - self.window_s:
            self._q.popleft()

    def value(self, now: float | None = None) -> float | None:
        if now is not None:
            self._expire(now)
        return self._sign * self._q[0][1] if self._q else None


@dataclass(frozen=True)
class NetworkEstimate:
    """A snapshot of the monitor (units: bytes, seconds, bytes/second)."""

    max_rate: float
    min_rtt: float
    bdp: float
    queue_delay: float
    samples: int


class NetworkMonitor:
    """Windowed max delivery rate, min RTT, BDP and queueing delay (see module docstring)."""

    def __init__(self, window_s: float = 5.0, min_transfer_fraction: float = 0.25) -> None:
        if not 0 < min_transfer_fraction <= 1:
            raise ValueError(f"min_transfer_fraction must be in (0, 1], got {min_transfer_fraction}")
        self.window_s = window_s
        self.min_transfer_fraction = min_transfer_fraction
        self._rate = WindowedExtreme(window_s, "max")
        self._rtt = WindowedExtreme(window_s, "min")
        self._last: tuple[float, float] | None = None
        self.samples = 0

    def add(self, nbytes: float, seconds: float, t: float | None = None) -> None:
        """Records one collective; samples with no bytes or no duration are ignored."""
        if nbytes <= 0 or seconds <= 0:
            return
        now = time.monotonic() if t is None else t
        self._rtt.add(seconds, now)
        rtt = self._rtt.value()
        assert rtt is not None
        transfer = max(seconds - rtt, self.min_transfer_fraction * seconds)
        self._rate.add(nbytes / transfer, now)
        self._last = (nbytes, seconds)
        self.samples += 1

    def estimate(self, now: float | None = None) -> NetworkEstimate | None:
        """Current estimate, or None before the first sample."""
        rate = self._rate.value(now)
        rtt = self._rtt.value(now)
        if rate is None or rtt is None or self._last is None:
            return None
        nbytes, seconds = self._last
        queue = max(0.0, seconds - rtt - nbytes / rate)
        return NetworkEstimate(rate, rtt, rate * rtt, queue, self.samples)
