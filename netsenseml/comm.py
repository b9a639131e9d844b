"""The communicator: hands payloads to ``torch.distributed`` and accounts for them.

* Summable payloads (fp32, fp16/bf16 casts, random-k values under a shared seed) are
  **allreduced**.
* Payloads that must be decoded per rank (int8 codes with their own scale, top-k values
  and indices) are **all-gathered** as byte buffers. Ranks may send different amounts
  (DGC's threshold selects a rank-dependent count; the adaptive policy changes k between
  steps), so buffers are padded to a capacity every rank knows (``k`` of the agreed kept
  fraction for top-k: a rank may select fewer, never more) or, without such a bound, the
  byte counts are all-gathered first (8 bytes) and buffers padded to the largest. Nothing
  is truncated; the padding is counted as sent because it is handed to torch.distributed.

Each rank's byte buffer is ``[int64 length per wire tensor][float32 extras][tensor bytes]``;
``extras`` are a few float32 values piggy-backed on the collective (the adaptive policy's
measurements), so that ranks agree without an extra round trip.

:class:`CommRecorder` counts the bytes of every tensor this rank hands to
``torch.distributed`` as input (``all_reduce``'s tensor, ``all_gather``'s input tensor) and
the time collectives are in flight, and feeds the monitor samples ``(bytes, seconds)``, the
bytes in fp32-allreduce-equivalent units (an all-gather's input x W/2: per byte handed, a
W-rank ring all-gather moves W/2 times what a ring allreduce moves):

* **Payloads in flight together are one sample.** gloo runs a group's collectives
  concurrently (a process group has two worker threads: a 4-byte allreduce launched after
  a 50 MB one finishes first), so DDP's buckets share the path while they overlap, and the
  time of any one of them says nothing about the rate. A *period* opens when a payload is
  launched with none in flight and closes when the last payload in flight completes; its
  sample is the payloads' summed bytes over the time from the period's start (the later of
  the first launch and the last completion before it: a collective launched while another
  still runs has not started) to its close.
* **Tiny collectives** (``tiny_bytes`` or fewer: the hooks' RTT probe, an all-gather's size
  exchange) are samples of their own at once, for the min RTT; they neither open nor close
  a period, nor move its start: the payload runs beside the RTT probe on gloo's other
  thread, so its bytes flow from its launch, and a completion is timed when its Python
  callback gets the GIL, late on a busy machine -- a start moved to the probe's completion
  would cut transfer time out of the sample and read the link too fast. A sample thus errs
  long only (the wait for the last rank, a late callback), never short: the monitor's
  windowed maximum (``netsenseml.monitor``) is built for samples that err low.

``service_time=False`` gives each collective's (bytes handed, launch to completion), as the
NetSenseML prototype measured them (``netsenseml.paper_rule``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import torch
import torch.distributed as dist

from netsenseml import clock


class SampleSink(Protocol):
    """Receives one sample per collective (``netsenseml.monitor.NetworkMonitor``, or the
    prototype rule of ``netsenseml.paper_rule``, which judges each sample)."""

    def add(self, nbytes: float, seconds: float, t: float | None = None) -> None: ...


class CommTotals(NamedTuple):
    """A :class:`CommRecorder`'s state at one instant; differences of two are a step's."""

    bytes_sent: int
    busy_s: float
    collectives: int
    last_done: float  # perf_counter of the last completion
    last_launch: float  # perf_counter of the last launch


class CommRecorder:
    """Bytes handed to torch.distributed and busy time of this rank's collectives.

    ``busy_s`` is the length of the union of the intervals [launch, completion] of all
    collectives: overlapping buckets are not counted twice. Completion callbacks run on
    the process group's threads, hence the lock.
    """

    def __init__(self, monitor: SampleSink | None = None, service_time: bool = True,
                 tiny_bytes: int = 64) -> None:
        self.monitor = monitor
        self.service_time = service_time
        self.tiny_bytes = tiny_bytes
        self._lock = threading.Lock()
        self.bytes_sent = 0  # cumulative, never reset: users take differences
        self.busy_s = 0.0
        self.collectives = 0
        self.last_done = 0.0
        self.last_launch = 0.0
        self._inflight = 0
        self._busy_since = 0.0
        # the open period of payload collectives (module docstring)
        self._period_open = 0
        self._period_start = 0.0
        self._period_bytes = 0.0
        self._period_rate_ok = True

    def launch(self, nbytes: int, at: float | None = None,
               equiv: float | None = None, rate_ok: bool = True) -> tuple[float, float, float, bool, bool]:
        """Counts a collective launched now (or at ``at``); returns a token for :meth:`done`.

        ``equiv``: its fp32-allreduce-equivalent bytes for the monitor (default ``nbytes``);
        ``rate_ok=False``: its period is a sample for the min RTT only.
        """
        now = clock.now() if at is None else at
        eq = float(nbytes if equiv is None else equiv)
        payload = self.service_time and nbytes > self.tiny_bytes
        with self._lock:
            self.bytes_sent += nbytes
            self.collectives += 1
            self.last_launch = max(self.last_launch, now)
            if self._inflight == 0:
                self._busy_since = now
            self._inflight += 1
            if payload:
                if self._period_open == 0:
                    self._period_start = max(now, self.last_done)
                    self._period_bytes = 0.0
                    self._period_rate_ok = True
                self._period_open += 1
                self._period_bytes += eq
                self._period_rate_ok = self._period_rate_ok and rate_ok
        return now, eq, float(nbytes), rate_ok, payload

    def done(self, token: tuple[float, float, float, bool, bool], at: float | None = None) -> None:
        """Counts the completion (now, or at ``at``) of the collective ``token`` names."""
        now = clock.now() if at is None else at
        t0, equiv, nbytes, rate_ok, payload = token
        sample: tuple[float, float, bool] | None = None
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self.busy_s += now - self._busy_since
            if not self.service_time:
                sample = (nbytes, now - t0, rate_ok)
            elif payload:
                self._period_open -= 1
                if self._period_open == 0:
                    sample = (self._period_bytes, now - self._period_start, self._period_rate_ok)
            else:
                sample = (equiv, now - max(t0, self.last_done), rate_ok)
            self.last_done = max(self.last_done, now)
            if self.monitor is not None and sample is not None:
                if self.service_time:
                    self.monitor.add(sample[0], sample[1], rate_ok=sample[2])  # type: ignore[call-arg]
                else:
                    self.monitor.add(sample[0], sample[1])

    def totals(self, at: float | None = None) -> CommTotals:
        """The cumulative counts and the last completion and launch times, read together.

        ``busy_s`` includes the open busy interval up to now (or ``at``): a step read while
        one of its collectives is still in flight counts the time that one has run, and the
        next reading the rest, so differences of readings add up to the union.
        """
        now = clock.now() if at is None else at
        with self._lock:
            busy = self.busy_s + (max(0.0, now - self._busy_since) if self._inflight else 0.0)
            return CommTotals(self.bytes_sent, busy, self.collectives, self.last_done,
                              self.last_launch)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def allreduce(
    tensor: torch.Tensor, group: Any, recorder: CommRecorder
) -> torch.futures.Future[torch.Tensor]:
    """Sum-allreduce ``tensor`` in place; the future holds ``tensor``."""
    token = recorder.launch(_nbytes(tensor))
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def finish(f: torch.futures.Future) -> torch.Tensor:
        f.wait()
        recorder.done(token)
        return tensor

    return fut.then(finish)


def pack(tensors: Sequence[torch.Tensor], extras: torch.Tensor | None) -> torch.Tensor:
    """Byte buffer ``[int64 lengths][float32 extras][tensor bytes...]`` (see module docstring)."""
    device = tensors[0].device if tensors else torch.device("cpu")
    header = torch.tensor([t.numel() for t in tensors], dtype=torch.int64, device=device)
    parts = [header.view(torch.uint8)]
    if extras is not None:
        parts.append(extras.to(device=device, dtype=torch.float32).reshape(-1).view(torch.uint8))
    parts += [t.contiguous().reshape(-1).view(torch.uint8) for t in tensors]
    return torch.cat(parts)


def unpack(
    buf: torch.Tensor, dtypes: Sequence[torch.dtype], n_extras: int
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Inverse of :func:`pack` for a buffer whose wire tensors have ``dtypes``."""
    nt = len(dtypes)
    lengths = buf[: 8 * nt].clone().view(torch.int64).tolist()
    off = 8 * nt
    extras = None
    if n_extras:
        extras = buf[off : off + 4 * n_extras].clone().view(torch.float32)
        off += 4 * n_extras
    tensors = []
    for dt, n in zip(dtypes, lengths, strict=True):
        size = int(n) * torch.empty((), dtype=dt).element_size()
        tensors.append(buf[off : off + size].clone().view(dt))
        off += size
    return tensors, extras


def unpack_extras(buf: torch.Tensor, n_tensors: int, n_extras: int) -> torch.Tensor:
    """Only the extras of a :func:`pack` buffer (payload mode decodes nothing else)."""
    off = 8 * n_tensors
    return buf[off : off + 4 * n_extras].clone().view(torch.float32)


class Packing(NamedTuple):
    """The layout of the byte buffers of one all-gathered payload (:func:`pack`): the wire
    tensors' dtypes, in order, and the number of float32 extras. Every rank knows it."""

    dtypes: tuple[torch.dtype, ...]
    n_extras: int

    def capacity(self, payload_bound: int | None) -> int | None:
        """The buffer's byte bound for a payload of at most ``payload_bound`` bytes (None:
        no bound, the sizes are exchanged first): the header, the extras and the payload."""
        if payload_bound is None:
            return None
        return 8 * len(self.dtypes) + 4 * self.n_extras + payload_bound

    def unpack(self, buf: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """One rank's wire tensors and extras (None without extras)."""
        return unpack(buf, self.dtypes, self.n_extras)

    def extras(self, buf: torch.Tensor) -> torch.Tensor:
        """Only one rank's extras (payload mode decodes nothing else)."""
        return unpack_extras(buf, len(self.dtypes), self.n_extras)


class GatherBuffers:
    """All-gather buffers kept from step to step, one set per key (a DDP bucket and its
    capacity): the padded send buffer and one receive buffer per rank.

    Payload mode (``netsenseml.payload``) uses them. There the host stands in for a device
    whose caching allocator hands the collective the same memory every step; fresh buffers
    (``world`` x the capacity a bucket, GPT-2's int8 levels ~1 GB a rank a step) cost this
    host page faults and copies inside the compute slots the pacer holds to the profile,
    work the device does not do. A key's collective completes before the next step starts
    it again (DDP waits for every bucket), so one set a key is never written twice at
    once. A key keeps one set, of its latest capacity: DDP's first step runs on other
    buckets than the rest and an adaptive method changes its level, and sets kept for
    those would hold gigabytes a rank for nothing (GPT-2's int8: a rank killed for memory
    with 8 on this host)."""

    def __init__(self) -> None:
        self._sets: dict[Any, tuple[torch.Tensor, list[torch.Tensor]]] = {}

    def get(self, key: Any, capacity: int, world: int, device: torch.device
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The send buffer and the receive buffers of ``key`` (made on first use, and
        again, the old ones dropped, when its capacity or the world changes)."""
        got = self._sets.get(key)
        if got is None or got[0].numel() != capacity or len(got[1]) != world:
            self._sets.pop(key, None)  # the old set is freed before the new one is made
            got = self._sets[key] = (
                torch.zeros(capacity, dtype=torch.uint8, device=device),
                [torch.zeros(capacity, dtype=torch.uint8, device=device) for _ in range(world)])
        return got


def allgather_packed(
    tensors: Sequence[torch.Tensor], extras: torch.Tensor | None, group: Any,
    recorder: CommRecorder, payload_bound: int | None = None,
    buffers: tuple[GatherBuffers, Any] | None = None,
) -> tuple[Packing, torch.futures.Future[list[torch.Tensor]]]:
    """All-gathers one payload's wire ``tensors`` (and ``extras``) of every rank, packed
    into byte buffers (:func:`pack`); ``payload_bound``: a bound of the payload's bytes that
    every rank computes alike (a compressor's ``max_nbytes``), so that one padded all-gather
    runs (:func:`allgather_bytes`); ``buffers``: kept buffers and this payload's key in
    them (:class:`GatherBuffers`; with a bound only). Returns the layout, whose
    :meth:`Packing.unpack` reads each rank's buffer, and the future of the buffers in rank
    order."""
    packing = Packing(tuple(t.dtype for t in tensors), 0 if extras is None else extras.numel())
    buf = pack(tensors, extras)
    capacity = packing.capacity(payload_bound)
    kept = None
    if buffers is not None and capacity is not None:
        pool, key = buffers
        kept = pool.get(key, capacity, dist.get_world_size(group), buf.device)
    return packing, allgather_bytes(buf, group, recorder, capacity, kept)


def allgather_bytes(
    buf: torch.Tensor, group: Any, recorder: CommRecorder, capacity: int | None = None,
    kept: tuple[torch.Tensor, list[torch.Tensor]] | None = None,
) -> torch.futures.Future[list[torch.Tensor]]:
    """All-gathers 1-D uint8 buffers of possibly different lengths; no truncation.

    With ``capacity`` (a bound every rank knows, e.g. the byte size of ``k`` values and
    indices for the agreed kept fraction; larger buffers are refused) each buffer is padded
    to it and one all-gather runs; the receivers find the true lengths in the header of
    :func:`pack`. Without it the byte counts are exchanged first. Either way every
    collective is *launched from the calling thread*: gloo needs all ranks to issue
    collectives in the same order, which launching from completion callbacks (whose
    timing differs per rank) would not guarantee. The future holds one buffer per rank,
    in rank order. ``kept`` (with ``capacity``): a send buffer and receive buffers of the
    capacity to use instead of new ones (:class:`GatherBuffers`); the send buffer's bytes
    past ``buf`` are whatever an earlier step left (the receivers read the true lengths).
    """
    world = dist.get_world_size(group)
    n = buf.numel()
    if capacity is None:
        size_t = torch.tensor([n], dtype=torch.int64, device=buf.device)
        size_outs = [torch.empty(1, dtype=torch.int64, device=buf.device) for _ in range(world)]
        token = recorder.launch(_nbytes(size_t), rate_ok=False)
        dist.all_gather(size_outs, size_t, group=group, async_op=True).wait()
        recorder.done(token)
        sizes = [int(s.item()) for s in size_outs]
        cap = max(sizes)
    else:
        if n > capacity:
            raise ValueError(f"payload of {n} bytes exceeds the agreed capacity {capacity}")
        sizes, cap = None, capacity
    if kept is not None and sizes is None:
        padded, outs = kept
        padded[:n].copy_(buf)
    else:
        padded = buf if n == cap else torch.cat([buf, buf.new_zeros(cap - n)])
        outs = [torch.empty(cap, dtype=torch.uint8, device=buf.device) for _ in range(world)]
    token = recorder.launch(_nbytes(padded), equiv=_nbytes(padded) * max(1.0, world / 2))
    work = dist.all_gather(outs, padded, group=group, async_op=True)

    def finish(f: torch.futures.Future) -> list[torch.Tensor]:
        f.wait()
        recorder.done(token)
        if sizes is None:
            return outs
        return [o[:s] for o, s in zip(outs, sizes, strict=True)]

    return work.get_future().then(finish)
