"""The network monitor: the base RTT and the available rate of the path the collectives take.

Every collective, or every set of payload collectives in flight together, is a sample
``(bytes, seconds)``: the payload this rank handed to ``torch.distributed``, in
fp32-allreduce-equivalent bytes, and its *service time* (``netsenseml.comm.CommRecorder``
says how concurrent collectives are combined). Two sensors are kept, like Linux's
``tcp_rate.c`` and BBR (Cardwell et al. 2016), and for the same reasons:

* **min RTT** -- the smallest service time over the last ``rtt_window`` samples. It must
  come from collectives too small to carry any transfer time, so the hooks issue one
  (a 4-byte allreduce through the recorder) every few steps; a collective that carries a
  payload is a sample too, but only ever a larger one.
* **delivery rate** -- ``bytes / (seconds - min_rtt)`` of the samples that can mean
  something, filtered over the last ``rate_window`` of them (a window counted in samples,
  i.e. in steps, however long the steps) by ``rate_filter``:

  - ``"sustained"`` (the default since issue 49's ``netsense ab`` against ``"max"`` on
    accel-d70 and accel-ramp: the same time to accuracy within the intervals, a closer
    estimate and fewer level changes under congestion; ``HookOptions.monitor_rate_filter``
    has the numbers): each rate sample is tagged *sustained*
    when the payload period before it was rate-sized too (the job kept its flow busy: int8
    step after int8 step), *isolated* otherwise (a probe after top-k steps). The estimate
    is the maximum of the sustained samples, as BBR's, where the window holds one not older
    than ``rate_max_age`` samples; else the minimum of the isolated ones. Why: alone on
    the path every sample errs low (software cost, the wait for the last rank), so the
    maximum; beside competing TCP flows an isolated burst errs *high* -- on the committed
    accel-d70 runs (8 Gbit/s, 8 iperf3 streams, share 889 Mbit/s) the isolated samples
    (fp16 probes after top-k steps) read 0.8-3.8x the share, median 2.2 (9 samples), the
    sustained ones (int8 step after int8 step) 0.3-3.1x, median 1.0 (22), and the max
    filter held a probe's luck for the rest of the phase (top-k's all-gathers are no rate
    samples): a median of 0.8-3.8x the share per run. A burst after a quiet
    spell enters a drop-tail queue the cross flows keep full and, until it loses, takes
    the share of the arrivals rather than of the flows; and a collective completes on a
    rank once it has *received* what it needs, so what it sent may still be queued (after 4 of the 9 probes the
    next top-k step took 1.7-6.1 ms where those before it took 0.5-1.3). What a level
    will get when sent step after step is what the sustained samples read.
    ``pair_next=True`` also takes each rate sample together with the payload period after
    it (bytes and transfer times summed), which pays that debt; it reads 10-30 % low where
    the next period's own fixed cost is large, and is off by default
    (``benchmarks/rate_filters.py`` replays both on the committed runs).
  - ``"max"`` (the default before issue 49; BBR's: a TCP sender's samples err low --
    app-limited, ACK compression) and ``"median"``: over all the window's samples. A
    sample here is one whole payload period, which under congestion errs both ways (on
    ``eval-onoff``, 40-500 Mbit/s samples where one flow's fair share was 56), and the
    maximum of such a window is its luckiest burst; the median looked better offline but
    not in real runs (3 seeds each of eval-onoff and eval-ramp: idle errors of 7-53 %,
    max 9-17 %; congested 0.4-3.4x, max 0.6-2.8x).
  An estimate whose newest rate sample is more than ``rate_max_age``
  samples old is no estimate (the job sent only short transfers since: the path may have
  changed, and the windowed max would hold the old rate forever); the next rate sample
  starts a new window. A sample is **discarded**, not floored, when

  - its bytes are below ``min_rate_bytes`` or ``bdp_multiple`` x the current BDP: a
    shaper's token bucket (HTB lets its burst out at the line's speed) and the first
    round trip make a short transfer look faster than the path, or
  - its transfer part ``seconds - min_rtt`` is shorter than one min RTT (``tcp_rate.c``
    discards a sample whose interval is below the min RTT for the same reason: too short
    to hold a rate), and in particular when the sample *is* a new min RTT.

  The min RTT used is the one *before* the sample is added, so a sample never shortens
  its own transfer time.

Their product is the **BDP**. The **queueing delay** is what the tiny collectives take now
beyond the min RTT: the median of the latest ``queue_window`` of them less the min RTT (a
standing queue delays every collective, however small, by about that; one tiny collective
alone also waits for the last rank, hence the median).

The kernel's view (:class:`TcpInfoSensor`): where the collectives travel over TCP (gloo),
the kernel measures its own delivery rate and min RTT per socket (``TCP_INFO``:
``tcpi_delivery_rate``, ``tcpi_delivery_rate_app_limited``, ``tcpi_min_rtt``). The hooks
read them from the process's own TCP sockets to its peers (``/proc/self/fd``, the
rendezvous store's socket excluded) and record them beside the monitor's; the policy
does not use them (a collective's traffic is app-limited between bursts, so most kernel
samples are), they are a second sensor to check the first against.

Pure Python (no torch), so it can be unit-tested with synthetic sample streams; pass
``t`` explicitly in tests, ``time.monotonic()`` is used otherwise.
"""

from __future__ import annotations

import os
import socket
import struct
from collections import deque
from dataclasses import dataclass


class WindowedExtreme:
    """Running max (or min) over a sliding time window, O(1) amortised per sample.

    A monotone deque keeps only candidates that can still become the extreme (the
    prototype's rule, ``netsenseml.paper_rule``, windows in seconds).
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


class CountedExtreme:
    """Running max (or min) over the last ``window`` samples, O(1) amortised per sample.

    The monitor's windows count samples (steps, round trips), not seconds: a window in
    seconds would span many steps of a fast job and few of a slow one.
    """

    def __init__(self, window: int, mode: str = "max") -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, got {window}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.window = window
        self._sign = 1.0 if mode == "max" else -1.0
        self._q: deque[tuple[int, float]] = deque()  # (index, signed value), values decreasing
        self._n = 0

    def add(self, value: float) -> None:
        v = self._sign * value
        while self._q and self._q[-1][1] <= v:
            self._q.pop()
        self._q.append((self._n, v))
        self._n += 1
        while self._q[0][0] <= self._n - 1 - self.window:
            self._q.popleft()

    def value(self) -> float | None:
        return self._sign * self._q[0][1] if self._q else None

    def clear(self) -> None:
        self._q.clear()

    @property
    def count(self) -> int:
        """Samples added so far."""
        return self._n


class CountedMedian:
    """Median over the last ``window`` samples (a few: sorted on read)."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, got {window}")
        self.window = window
        self._q: deque[float] = deque(maxlen=window)
        self._n = 0

    def add(self, value: float) -> None:
        self._q.append(value)
        self._n += 1

    def value(self) -> float | None:
        if not self._q:
            return None
        v = sorted(self._q)
        mid = len(v) // 2
        return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])

    def clear(self) -> None:
        self._q.clear()

    @property
    def count(self) -> int:
        """Samples added so far."""
        return self._n


class SustainedWindow:
    """The last ``window`` rate samples, each tagged sustained or isolated (the
    ``"sustained"`` filter, module docstring): of those not older than ``max_age`` samples
    of the monitor, the maximum of the sustained ones, else the minimum of the isolated."""

    def __init__(self, window: int, max_age: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, got {window}")
        self.window, self.max_age = window, max_age
        self._q: deque[tuple[float, bool, int]] = deque(maxlen=window)  # (rate, sustained, at)
        self._n = 0
        self.now = 0  # the monitor's sample count, for the age of a sustained sample

    def add(self, value: float, sustained: bool = True, at: int = 0) -> None:
        self._q.append((value, sustained, at))
        self._n += 1

    def value(self) -> float | None:
        if not self._q:
            return None
        # the samples that speak for the path now: those not older than max_age (all of
        # them where none is: the monitor's rate_max_age ends such an estimate anyway)
        pool = [(v, sus) for v, sus, at in self._q if self.now - at <= self.max_age] or [
            (v, sus) for v, sus, _ in self._q]
        sustained = [v for v, sus in pool if sus]
        return max(sustained) if sustained else min(v for v, _ in pool)

    def clear(self) -> None:
        self._q.clear()

    @property
    def count(self) -> int:
        """Samples added so far."""
        return self._n


RATE_FILTERS = ("sustained", "max", "median")


@dataclass(frozen=True)
class NetworkEstimate:
    """A snapshot of the monitor (units: bytes, seconds, bytes/second).

    ``max_rate`` is the windowed delivery rate (the monitor's ``rate_filter``: the
    sustained samples' maximum, else the isolated ones' minimum; or the window's maximum
    or median). It is None while no sample could mean a rate,
    and once the newest one is more than the monitor's ``rate_max_age`` samples old;
    ``rate_age`` counts the samples (of any size) since the newest rate sample.
    """

    max_rate: float | None
    min_rtt: float
    bdp: float
    queue_delay: float
    samples: int
    rate_samples: int
    rate_age: int


class NetworkMonitor:
    """Windowed min RTT and filtered delivery rate (module docstring)."""

    def __init__(self, rate_window: int = 8, rtt_window: int = 200,
                 min_rate_bytes: float = 1 << 19, bdp_multiple: float = 4.0,
                 queue_window: int = 5, tiny_bytes: float = 64, rate_max_age: int = 32,
                 rate_filter: str = "sustained", pair_next: bool = False) -> None:
        if rate_filter not in RATE_FILTERS:
            raise ValueError(f"rate_filter must be one of {', '.join(RATE_FILTERS)}, got {rate_filter!r}")
        if rate_window < 1 or rtt_window < 1 or rate_max_age < 1:
            raise ValueError(f"rate_window, rtt_window and rate_max_age must be >= 1, got "
                             f"{rate_window}, {rtt_window}, {rate_max_age}")
        if min_rate_bytes < 0 or bdp_multiple < 0:
            raise ValueError("min_rate_bytes and bdp_multiple must be >= 0")
        self.min_rate_bytes = min_rate_bytes
        self.bdp_multiple = bdp_multiple
        self.rate_filter = rate_filter
        self.pair_next = pair_next
        self._rate: CountedExtreme | CountedMedian | SustainedWindow = (
            CountedMedian(rate_window) if rate_filter == "median"
            else SustainedWindow(rate_window, rate_max_age) if rate_filter == "sustained"
            else CountedExtreme(rate_window, "max"))
        self._rtt = CountedExtreme(rtt_window, "min")
        self._last: tuple[float, float] | None = None
        self._last_rate_at = -1
        self.rate_max_age = rate_max_age
        self.last_rate_sample: tuple[float, float, float] | None = None  # (bytes, s, min RTT)
        self.last_rate_sustained = True  # whether that sample was sustained ("sustained" filter)
        # the "sustained" filter: a rate-sized period waiting for the next payload period
        # (bytes, seconds, min RTT, sustained), and whether the last payload period was one
        self._pending: tuple[float, float, float, bool] | None = None
        self._prev_big = False
        self._tiny: deque[float] = deque(maxlen=max(1, queue_window))
        self.tiny_bytes = tiny_bytes
        self.samples = 0
        self.discarded = 0

    @property
    def min_rtt(self) -> float | None:
        return self._rtt.value()

    def _expired(self) -> bool:
        return self._last_rate_at < 0 or self.samples - self._last_rate_at > self.rate_max_age

    @property
    def max_rate(self) -> float | None:
        return None if self._expired() else self._rate.value()

    def restart_rate(self) -> None:
        """Forgets the rate samples (the path changed: the policy saw a new regime)."""
        self._rate.clear()
        self._last_rate_at = -1
        self._pending = None

    def rate_threshold(self) -> float:
        """Fewest bytes a sample needs to count as a rate sample now."""
        rtt, rate = self._rtt.value(), self.max_rate
        bdp = rtt * rate if rtt is not None and rate is not None else 0.0
        return max(self.min_rate_bytes, self.bdp_multiple * bdp)

    def add(self, nbytes: float, seconds: float, t: float | None = None, rate_ok: bool = True) -> bool:
        """Records one collective; returns True when it became a rate sample.

        Samples with no bytes or no duration are ignored; ``rate_ok=False``: a sample for
        the min RTT only. ``t`` is accepted for the sample-sink interface (the windows
        count samples, not seconds).
        """
        del t
        if nbytes <= 0 or seconds <= 0:
            return False
        rtt = self._rtt.value()
        self._rtt.add(seconds)
        self._last = (nbytes, seconds)
        self.samples += 1
        if nbytes <= self.tiny_bytes:
            self._tiny.append(seconds)
        if self.rate_filter == "sustained":
            return self._add_sustained(nbytes, seconds, rtt, rate_ok)
        if not rate_ok or rtt is None or nbytes < self.rate_threshold():
            return False
        transfer = seconds - rtt
        if transfer < rtt or transfer <= 0:
            self.discarded += 1
            return False
        if self._expired():
            self._rate.clear()  # the old window says nothing about the path now
        self._rate.add(nbytes / transfer)
        self._last_rate_at = self.samples
        self.last_rate_sample = (nbytes, seconds, rtt)
        return True

    def _take(self, nbytes: float, transfer: float, rtt: float, sustained: bool) -> None:
        if self._expired():
            self._rate.clear()  # the old window says nothing about the path now
        if isinstance(self._rate, SustainedWindow):
            self._rate.now = self.samples
            self._rate.add(nbytes / transfer, sustained, self.samples)
        else:
            self._rate.add(nbytes / transfer)
        self._last_rate_at = self.samples
        self.last_rate_sample = (nbytes, transfer + rtt, rtt)
        self.last_rate_sustained = sustained

    def _add_sustained(self, nbytes: float, seconds: float, rtt: float | None,
                       rate_ok: bool) -> bool:
        """The ``"sustained"`` filter's sample (module docstring): a rate-sized period is
        tagged by whether the payload period before it was rate-sized too; with
        ``pair_next`` it is held until the next payload period completes and taken with it.
        Tiny collectives (the RTT probe) are no payload period."""
        if isinstance(self._rate, SustainedWindow):
            self._rate.now = self.samples
        if nbytes <= self.tiny_bytes:
            return False
        big = rate_ok and rtt is not None and nbytes >= self.rate_threshold()
        if not self.pair_next:
            taken = False
            if big:
                assert rtt is not None
                if seconds - rtt < rtt:
                    self.discarded += 1  # too short to hold a rate, or a new min RTT
                else:
                    self._take(nbytes, seconds - rtt, rtt, self._prev_big)
                    taken = True
            self._prev_big = big
            return taken
        taken = False
        pending, self._pending = self._pending, None
        if pending is not None and rate_ok:
            b0, s0, r0, sustained = pending
            # both periods' transfer parts: the second pays what the first left queued
            transfer = (s0 - r0) + max(0.0, seconds - (rtt if rtt is not None else r0))
            self._take(b0 + nbytes, transfer, r0, sustained)
            taken = True
        if big:
            assert rtt is not None
            if seconds - rtt < rtt:
                self.discarded += 1  # too short to hold a rate (tcp_rate.c), or a new min RTT
            else:
                self._pending = (nbytes, seconds, rtt, self._prev_big)
        self._prev_big = big
        return taken

    def estimate(self, now: float | None = None) -> NetworkEstimate | None:
        """Current estimate, or None before the first sample."""
        del now
        rtt = self._rtt.value()
        if rtt is None or self._last is None:
            return None
        rate = self.max_rate
        recent = sorted(self._tiny)
        queue = max(0.0, recent[len(recent) // 2] - rtt) if recent else 0.0
        age = self.samples - self._last_rate_at if self._last_rate_at >= 0 else self.samples
        return NetworkEstimate(rate, rtt, (rate or 0.0) * rtt, queue, self.samples,
                               self._rate.count, age)


# ----------------------------------------------------------------------------- TCP_INFO
# struct tcp_info (include/uapi/linux/tcp.h): the offsets of the fields read here.
_TCP_INFO_LEN = 232
_OFF_FLAGS = 7  # tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2
_OFF_TOTAL_RETRANS = 100  # u32, segments retransmitted over the socket's life
_OFF_BYTES_ACKED = 120  # u64
_OFF_MIN_RTT = 148  # u32, microseconds
_OFF_DELIVERY_RATE = 160  # u64, bytes/s
_TCP_INFO = getattr(socket, "TCP_INFO", 11)


@dataclass(frozen=True)
class TcpView:
    """The kernel's view over this process's peer sockets (None where not available).

    ``delivery_rate_Bps``: the largest ``tcpi_delivery_rate`` of a socket whose latest
    sample was not app-limited (else the largest of any, with ``app_limited`` True);
    ``min_rtt_s``: the smallest ``tcpi_min_rtt``; ``sockets``: how many were read;
    ``retrans``: segments the sockets retransmitted since the previous read
    (``tcpi_total_retrans``; a congested run's spread is in them).
    """

    delivery_rate_Bps: float | None
    app_limited: bool
    min_rtt_s: float | None
    sockets: int
    retrans: int = 0


def parse_tcp_info(raw: bytes) -> tuple[float, bool, float, int]:
    """``(delivery_rate B/s, app_limited, min_rtt s, bytes_acked)`` of a TCP_INFO blob."""
    if len(raw) < _OFF_DELIVERY_RATE + 8:
        raise ValueError(f"TCP_INFO of {len(raw)} bytes is too short (kernel before 4.9?)")
    app_limited = bool(raw[_OFF_FLAGS] & 1)
    (acked,) = struct.unpack_from("<Q", raw, _OFF_BYTES_ACKED)
    (min_rtt_us,) = struct.unpack_from("<I", raw, _OFF_MIN_RTT)
    (rate,) = struct.unpack_from("<Q", raw, _OFF_DELIVERY_RATE)
    return float(rate), app_limited, min_rtt_us * 1e-6, int(acked)


def parse_total_retrans(raw: bytes) -> int:
    """``tcpi_total_retrans`` of a TCP_INFO blob (segments retransmitted so far)."""
    if len(raw) < _OFF_TOTAL_RETRANS + 4:
        raise ValueError(f"TCP_INFO of {len(raw)} bytes is too short")
    return int(struct.unpack_from("<I", raw, _OFF_TOTAL_RETRANS)[0])


class TcpInfoSensor:
    """``TCP_INFO`` of this process's established TCP sockets to its collective peers.

    The sockets are found once (and again every ``rescan_every`` reads) among
    ``/proc/self/fd``; a socket whose peer port is ``exclude_port`` (the rendezvous store)
    is left out. Each read duplicates the descriptor, asks the kernel and closes the
    duplicate: the library's sockets are never touched.
    """

    def __init__(self, exclude_port: int | None = None, rescan_every: int = 50) -> None:
        self.exclude_port = exclude_port
        self.rescan_every = max(1, rescan_every)
        self._fds: list[int] = []
        self._reads = 0
        self._retrans: dict[int, int] = {}  # fd -> tcpi_total_retrans at the previous read
        self.available = hasattr(socket, "TCP_INFO") or os.path.isdir("/proc/self/fd")

    def _scan(self) -> list[int]:
        fds = []
        try:
            names = os.listdir("/proc/self/fd")
        except OSError:
            return []
        for name in names:
            try:
                fd = int(name)
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                s = socket.socket(fileno=os.dup(fd))
            except (OSError, ValueError):
                continue
            try:
                if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                peer = s.getpeername()
                if self.exclude_port is not None and peer[1] == self.exclude_port:
                    continue
                fds.append(fd)
            except OSError:  # a listening or unconnected socket
                continue
            finally:
                s.close()
        return fds

    def read(self) -> TcpView | None:
        """The kernel's view now, or None where no peer socket could be read."""
        if self._reads % self.rescan_every == 0:
            self._fds = self._scan()
        self._reads += 1
        limited, free, rtts = [], [], []
        retrans = 0
        for fd in self._fds:
            try:
                s = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            try:
                raw = s.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
                rate, app, rtt, acked = parse_tcp_info(raw)
                total = parse_total_retrans(raw)
            except (OSError, ValueError):
                continue
            finally:
                s.close()
            retrans += max(total - self._retrans.get(fd, total), 0)
            self._retrans[fd] = total
            if acked == 0:
                continue  # never carried data: not a collective's socket
            (limited if app else free).append(rate)
            if rtt > 0:
                rtts.append(rtt)
        if not limited and not free:
            return None
        best = max(free) if free else max(limited)
        return TcpView(best, not free, min(rtts) if rtts else None, len(limited) + len(free),
                       retrans)


RTT_PROBE_EVERY = 16
"""Steps between the tiny RTT collectives of the gathered levels (``rtt_probe_due``): every
such probe waits behind the queue a congested top-k phase keeps full and the step joins it;
at every 4th step it cost the d70 runs' top-k steps 10-25 ms each (results/README.md)."""


def rtt_probe_due(step: int, level: str, every: int = RTT_PROBE_EVERY) -> bool:
    """Whether the hooks issue the tiny RTT collective at ``step``: on every step that
    sends a dense allreduce (the dense levels are the ones a queue hurts most: their
    queueing delay is sampled every step), and every ``every`` steps otherwise. It runs
    beside the payload and does not time it (``netsenseml.comm``). Identical on every rank
    (step and level are)."""
    return level in ("none", "fp16", "bf16") or step % every == 0
