"""Replays a link through an adaptive policy, as the DDP hook would drive it.

No torch, no network: a what-if tool for the policies of ``netsenseml.policy``,
``netsenseml.paper_rule`` and the peers ``netsenseml.stellatrain`` and
``netsenseml.accordion`` (Accordion's gradient norms given as a trace, ``replay``'s
``grad_norms``); the tests and ``benchmarks/policy_response.py`` use it.

The link model of one collective of ``b`` fp32-allreduce-equivalent bytes (an all-gather's
payload x W/2, as ``netsenseml.policy`` counts them)::

    seconds = latency + queue + [gather_fixed_s if all-gathered]
              + min(b, burst) / burst_rate + max(0, b - burst) / rate

``rate`` is the job's share of a long transfer, ``queue`` the standing queue competing
traffic builds, and ``burst`` the bytes a token-bucket shaper lets out at ``burst_rate``
before it limits (HTB's burst leaves at the line's speed on an idle link; under drop-tail
congestion a short transfer still gets several times the fair share a long one gets). The
bucket is carried from collective to collective and refills at ``rate`` while the link
idles (:class:`TokenBucket`), as HTB's does: steps that send more per period than the rate
allows find it empty (``refill=False``: full at every collective, the older model).
Every step the job sends its gradient in ``buckets`` equal collectives, and (as the hooks
do) a 4-byte collective beside it where ``netsenseml.monitor.rtt_probe_due`` says so. A
rank waits for the slowest one (``skew_s`` x U(0, 1)) in its first collective of the
step, and the monitor's payload sample holds that wait (the probe beside the payload does
not time it: ``netsenseml.comm``). Noise
(seeded): ``jitter`` multiplies every collective by U(1 - jitter, 1 + jitter), with
probability ``spike_prob`` one is delayed by ``spike_s`` x U(0.5, 1.5) more, ``delay_s``
adds U(0, delay_s) to each, and
``compute_jitter`` multiplies compute and codec time by U(1 - c, 1 + c).

A :class:`~netsenseml.monitor.NetworkMonitor` sees every collective's (bytes, service time),
as in the hooks, and its rate reaches the policy with the observation; it restarts its
rate window when the policy reports a new regime.

The step loop is the hook's: a step's observation reaches the policy when the next step's
bucket 0 completes, and the decision applies from the step after that (two steps of lag).

Calibrated from real runs: :func:`fit_runs` reads run folders of an on/off scenario
(``steps.csv`` and ``events.csv``) and fits, per phase (idle: no cross traffic, congested:
cross traffic on), the link's fixed costs (allreduce and all-gather apart), rate, burst
and burst rate, and the noise the runs show (the spread of comm times split into a part
proportional to the time and a fixed scheduling delay, compute's spread, spikes, rank
skew); :class:`ReplayModel` holds them and writes/reads them as JSON, so a test can
replay what the emulated link does without emulating it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from netsenseml.loop import AdaptivePolicy, Measured, StepLoop, grad_norm_every
from netsenseml.monitor import RTT_PROBE_EVERY, NetworkMonitor
from netsenseml.policy import (
    GATHERED,
    Calibration,
    Decision,
    NetSensePolicy,
    bytes_ratio,
)


@dataclass(frozen=True)
class Link:
    """What the network offers the job during one step (bytes/s, seconds, bytes)."""

    rate: float  # the job's share of a long transfer
    latency: float = 2e-4  # seconds per collective
    queue: float = 0.0  # seconds of standing queue per collective
    burst: float = 0.0  # bytes that leave at burst_rate before the shaper limits
    burst_rate: float = math.inf

    def seconds(self, b: float, fixed: float = 0.0, tokens: float | None = None) -> float:
        """Seconds of one collective of ``b`` bytes; ``tokens``: the bytes the shaper's
        bucket holds now (None: a full bucket, ``burst``)."""
        fast = min(b, self.burst if tokens is None else max(0.0, min(tokens, self.burst)))
        slow = b - fast
        return self.latency + self.queue + fixed + fast / self.burst_rate + slow / self.rate


class TokenBucket:
    """The shaper's bucket between collectives, as HTB keeps it: the bytes a transfer
    takes from it leave at ``burst_rate``, the rest at ``rate``, and it refills at ``rate``
    up to ``burst`` while the link idles. So a short transfer leaves at line speed only as
    long as the steps leave the bucket time to refill: on a narrow link a job's average
    rate cannot exceed the shaped one, however short its transfers."""

    def __init__(self) -> None:
        self.tokens: float | None = None  # full at the first collective
        self.t = 0.0

    def seconds(self, link: Link, b: float, fixed: float, now: float) -> float:
        """Seconds of one collective launched at ``now`` (the replay's clock)."""
        if link.burst <= 0 or not math.isfinite(link.rate):
            return link.seconds(b, fixed)
        if self.tokens is None:
            self.tokens = link.burst
        self.tokens = min(link.burst, self.tokens + max(0.0, now - self.t) * link.rate)
        took = link.seconds(b, fixed, self.tokens)
        self.tokens -= min(b, self.tokens)
        self.t = now + took
        return took


@dataclass(frozen=True)
class Job:
    """The training job: gradient size, ranks, compute and codec seconds per step."""

    dense_bytes: float = 1.2e6
    world_size: int = 2
    compute_s: float = 0.01
    buckets: int = 1
    hidden_s: float = 0.0
    codec_s: Mapping[str, float] = field(
        default_factory=lambda: {"none": 0.0, "fp16": 2e-4, "bf16": 2e-4, "int8": 1e-3, "topk": 3e-3}
    )
    topk_bytes_per_element: float = 8.0
    gather_fixed_s: float = 0.0  # extra seconds per all-gathered collective
    skew_s: float = 0.0  # how much later the last rank reaches a collective, at most
    rtt_probe_every: int = RTT_PROBE_EVERY  # the hooks' tiny collective (netsenseml.monitor.rtt_probe_due)


@dataclass(frozen=True)
class Step:
    """One replayed step: what it sent and what it took."""

    step: int
    decision: Decision
    link: Link
    comm_s: float
    step_s: float
    bytes_sent: float
    rate_Bps: float = 0.0  # the monitor's rate the policy saw with this step


def calibration(job: Job, link: Link) -> Calibration:
    """What the registration calibration would measure on ``link`` (no jitter): a one-element
    allreduce and all-gather, and a 1 MB allreduce for the bandwidth."""
    size = min(job.dense_bytes, 1 << 20)
    t = link.seconds(size) - link.seconds(0.0)
    return Calibration(
        dense_bytes=job.dense_bytes,
        world_size=job.world_size,
        latency_s=link.latency + link.queue,
        s_per_byte=t / size,
        codec_s=dict(job.codec_s),
        topk_bytes_per_element=job.topk_bytes_per_element,
        gather_latency_s=link.latency + link.queue + job.gather_fixed_s,
    )


def wire_bytes(job: Job, d: Decision) -> float:
    b = job.dense_bytes * bytes_ratio(d.level, d.ratio, job.topk_bytes_per_element)
    return b * max(1.0, job.world_size / 2) if d.level in GATHERED else b


class _Noise:
    """The replay's seeded noise (module docstring) on one collective's seconds."""

    def __init__(self, rng: random.Random, noise: Mapping[str, float]) -> None:
        self.rng = rng
        self.jitter, self.spike_prob = noise.get("jitter", 0.0), noise.get("spike_prob", 0.0)
        self.spike_s, self.compute = noise.get("spike_s", 0.0), noise.get("compute_jitter", 0.0)
        self.delay_s = noise.get("delay_s", 0.0)

    def __call__(self, seconds: float) -> float:
        rng = self.rng
        if self.jitter:
            seconds *= 1.0 + rng.uniform(-self.jitter, self.jitter)
        if self.spike_prob and rng.random() < self.spike_prob:
            seconds += self.spike_s * rng.uniform(0.5, 1.5)
        if self.delay_s:
            seconds += rng.uniform(0.0, self.delay_s)
        return seconds


def _run_step(loop: StepLoop | None, job: Job, link: Link, decision: Decision, noisy: _Noise,
              clock: float, bucket: TokenBucket | None = None) -> tuple[Measured, float]:
    """One step of ``decision`` on ``link``: what it measured and its period. ``loop``:
    the adaptive method's (its RTT probe, its monitor and the rule's samples; None: a
    fixed level, no monitor). ``bucket``: the shaper's token bucket carried from step to
    step (None: full at every collective)."""
    rng = noisy.rng
    monitor = loop.monitor if loop is not None else None
    # the payload leaves after the backward pass and the codec (their noise-free time: the
    # bucket's refill needs only the gap, and the random draws keep their order)
    launch = clock + job.compute_s + job.codec_s.get(decision.level, 0.0)

    def wire(b: float, fixed: float = 0.0) -> float:
        return (bucket.seconds(link, b, fixed, launch + comm) if bucket is not None
                else link.seconds(b, fixed))

    gathered = decision.level in GATHERED
    per_bucket = wire_bytes(job, decision) / job.buckets
    handed = job.dense_bytes * bytes_ratio(decision.level, decision.ratio, job.topk_bytes_per_element)
    comm, collectives = 0.0, job.buckets
    if loop is not None and loop.rtt_probe_due():
        tiny = noisy(wire(4.0)) + job.skew_s * rng.random()
        comm += tiny
        collectives += 1
        loop.monitor.add(4.0, tiny)
    else:
        comm += 0.5 * job.skew_s * rng.random()  # the mean rank waits for the last
    payload_s = 0.0
    rule = loop.policy if loop is not None and loop.policy.takes_samples else None
    for _ in range(job.buckets):
        seconds = noisy(wire(per_bucket, job.gather_fixed_s if gathered else 0.0))
        comm += seconds
        payload_s += seconds
        if rule is not None:
            rule.add(per_bucket, seconds, clock + comm)  # type: ignore[attr-defined]
    if monitor is not None:
        # the buckets are in flight together in a real run: one sample (netsenseml.comm),
        # timed from this rank's launch, so it holds this rank's wait for the last one
        wait = job.skew_s * rng.random() if job.skew_s else 0.0
        monitor.add(per_bucket * job.buckets, payload_s + wait)
    codec = job.codec_s.get(decision.level, 0.0)
    compute = job.compute_s
    if noisy.compute:
        compute *= 1.0 + rng.uniform(-noisy.compute, noisy.compute)
        codec *= 1.0 + rng.uniform(-noisy.compute, noisy.compute)
    exposed = max(comm / collectives, comm - job.hidden_s)
    measured = Measured(comm_s=comm, exposed_s=exposed, compute_s=compute + codec, codec_s=codec,
                        bytes_sent=handed, collectives=collectives,
                        overlap_s=job.hidden_s if job.buckets > 1 else 0.0)
    return measured, compute + codec + exposed


def replay(policy: AdaptivePolicy, job: Job, links: Iterable[Link], *, seed: int = 0,
           monitor: NetworkMonitor | None = None, refill: bool = True,
           grad_norms: Callable[[int], Sequence[float]] | None = None,
           **noise: float) -> list[Step]:
    """Runs one step per entry of ``links`` through the step loop (``netsenseml.loop``, as
    the hook drives it); calibrates a policy that needs it on the first link.

    ``refill``: the links' burst is a token bucket that refills at the link's rate between
    collectives (:class:`TokenBucket`, what HTB does); False: full at every collective.

    ``noise``: ``jitter``, ``spike_prob``, ``spike_s``, ``compute_jitter`` (module doc) and
    ``delay_s`` (U(0, delay_s) more on every collective: a busy host's scheduling).

    ``grad_norms``: for a policy that reads accumulated gradient norms (its
    ``grad_norm_every``, Accordion), ``grad_norms(step)`` gives the per-bucket norms of the
    window that step ``step`` closes (a replay has no gradients; without it such a policy
    sees none and keeps its decision). A per-bucket decision is replayed as its step's
    summary level on every bucket.
    """
    unknown = set(noise) - {"jitter", "spike_prob", "spike_s", "compute_jitter", "delay_s"}
    if unknown:
        raise ValueError(f"unknown noise {sorted(unknown)}")
    links = list(links)
    loop = StepLoop(policy, monitor or NetworkMonitor(), job.rtt_probe_every)
    if policy.needs_calibration and getattr(policy, "calibration", None) is None:
        loop.calibrate(calibration(job, links[0]))
    noisy = _Noise(random.Random(seed), noise)
    clock = 0.0
    out = []
    bucket = TokenBucket() if refill else None
    every = grad_norm_every(policy)
    for link in links:
        decision = loop.next_step()
        measured, period = _run_step(loop, job, link, decision, noisy, clock, bucket)
        if grad_norms is not None and every and loop.step % every == 0:
            measured = dataclasses.replace(measured, grad_norms=tuple(grad_norms(loop.step)))
        obs = loop.end_step(measured)
        clock += period
        out.append(Step(loop.step, decision, link, measured.comm_s, period, measured.bytes_sent,
                        obs.rate_Bps))
    return out


def step_seconds(job: Job, link: Link, decision: Decision, refill: bool = True) -> float:
    """Seconds of one noise-free step of ``decision`` on ``link``, sent step after step
    (``refill``: the shaper's bucket as the steps leave it, :class:`TokenBucket`; the mean
    of steps 21-40, when a short transfer's bucket has reached its steady state)."""
    if not refill:
        return _run_step(None, job, link, decision, _Noise(random.Random(0), {}), 0.0)[1]
    bucket, clock, periods = TokenBucket(), 0.0, []
    for _ in range(1, 41):
        period = _run_step(None, job, link, decision, _Noise(random.Random(0), {}), clock, bucket)[1]
        clock += period
        periods.append(period)
    return sum(periods[20:]) / len(periods[20:])


def oracle(job: Job, link: Link, policy: NetSensePolicy | None = None) -> Decision:
    """The candidate of smallest true ``J`` (the replay's own step time x the policy's prior)."""
    policy = policy or NetSensePolicy()
    return min(policy.candidates(),
               key=lambda d: (policy.steps_factor(d) * step_seconds(job, link, d), policy.fidelity(d)))


def changes(steps: list[Step]) -> int:
    """How many times the decision changed between consecutive steps (probes left out)."""
    kept = [s for s in steps if not s.decision.probe]
    return sum(1 for a, b in zip(kept, kept[1:], strict=False) if a.decision != b.decision)


def level_changes(steps: list[Step]) -> int:
    """How many times the level (none / fp16 / int8 / topk) changed (probes left out)."""
    kept = [s for s in steps if not s.decision.probe]
    return sum(1 for a, b in zip(kept, kept[1:], strict=False) if a.decision.level != b.decision.level)


def segment_changes(levels: Sequence[str], phases: Sequence[str]) -> list[tuple[str, int]]:
    """Level changes within each run of equal ``phases`` (e.g. idle / congested), as
    ``[(phase, changes), ...]``; ``levels`` holds one level per non-probe step."""
    out: list[tuple[str, int]] = []
    prev_phase, prev_level, n = None, None, 0
    for lvl, ph in zip(levels, phases, strict=True):
        if ph != prev_phase:
            if prev_phase is not None:
                out.append((prev_phase, n))
            prev_phase, n = ph, 0
        elif lvl != prev_level:
            n += 1
        prev_level = lvl
    if prev_phase is not None:
        out.append((prev_phase, n))
    return out


# ----------------------------------------------------------------------------- calibration
@dataclass(frozen=True)
class ReplayModel:
    """A replay calibrated from run folders (module docstring); JSON round-trips."""

    job: Job
    idle: Link
    congested: Link
    noise: Mapping[str, float]
    source: Sequence[str] = ()

    def links(self, schedule: Sequence[tuple[str, int]]) -> list[Link]:
        """One link per step of ``[(phase, steps), ...]`` (phase: idle or congested)."""
        return [getattr(self, phase) for phase, n in schedule for _ in range(n)]

    def to_json(self) -> str:
        d = asdict(self)
        d["job"]["codec_s"] = dict(self.job.codec_s)
        return json.dumps(d, indent=1, default=lambda v: None if v == math.inf else v)

    @classmethod
    def from_json(cls, text: str) -> ReplayModel:
        d = json.loads(text)

        def link(v: dict) -> Link:
            return Link(**{k: (math.inf if x is None else x) for k, x in v.items()})

        return cls(Job(**d["job"]), link(d["idle"]), link(d["congested"]), d["noise"],
                   tuple(d.get("source", ())))


def _phase_times(events: Path) -> list[tuple[float, float]]:
    """(start, stop) of the cross traffic, on the run clock, from events.csv."""
    starts, spans = {}, []
    with open(events) as fh:
        for row in csv.DictReader(fh):
            t = float(row["t_applied"] or row["t_scheduled"])
            if row["kind"] == "cross_start":
                starts[row["target"]] = t
            elif row["kind"] == "cross_stop" and row["target"] in starts:
                spans.append((starts.pop(row["target"]), t))
    return spans


def _median(v: list[float]) -> float:
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _solve(rows: list[list[float]], ys: list[float], ridge: float = 1e-12) -> list[float]:
    """Least squares by normal equations (small, dense), with a tiny ridge."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) + (ridge if i == j else 0.0) for j in range(n)] for i in range(n)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(n)]
    for i in range(n):  # Gauss-Jordan with partial pivoting
        p = max(range(i, n), key=lambda k: abs(a[k][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        if abs(a[i][i]) < 1e-300:
            continue
        for k in range(n):
            if k != i:
                f = a[k][i] / a[i][i]
                a[k] = [x - f * y for x, y in zip(a[k], a[i], strict=True)]
                b[k] -= f * b[i]
    return [b[i] / a[i][i] if abs(a[i][i]) > 1e-300 else 0.0 for i in range(n)]


def _fit_phase(points: list[tuple[str, float, float]], latency: float) -> tuple[Link, float, float]:
    """``(link, gather_fixed_s, residual)`` of one phase from ``(kind, bytes, comm_s)``
    medians: the fixed costs, 1/rate and 1/burst_rate by least squares for each burst on
    a grid, the burst of least squared error (relative)."""
    best: tuple[float, Link, float] | None = None
    for burst in [0.0] + [2 ** (i / 2) * 16e3 for i in range(0, 14)]:
        rows, ys = [], []
        for kind, x, y in points:
            rows.append([1.0, 1.0 if kind == "allgather" else 0.0, min(x, burst), max(0.0, x - burst)])
            ys.append(y / max(y, 1e-9))
            rows[-1] = [v / max(y, 1e-9) for v in rows[-1]]
        fixed, g, inv_fast, inv_slow = _solve(rows, ys)
        if inv_slow <= 0 or fixed < 0 or g < -fixed:
            continue
        inv_fast = max(inv_fast, 0.0)
        err = sum((r[0] * fixed + r[1] * g + r[2] * inv_fast + r[3] * inv_slow - yy) ** 2
                  for r, yy in zip(rows, ys, strict=True))
        link = Link(1.0 / inv_slow, latency=min(latency, fixed), queue=max(0.0, fixed - latency),
                    burst=burst, burst_rate=1.0 / inv_fast if inv_fast > 0 else math.inf)
        if best is None or err < best[0] - 1e-12:
            best = (err, link, g)
    if best is None:
        raise ValueError("fit_runs: no physical fit (positive rate, fixed costs >= 0) of the comm times")
    return best[1], max(0.0, best[2]), best[0]


@dataclass
class _FitData:
    """What :func:`fit_runs` gathers from the runs' steps (rank means)."""

    per: dict[str, dict[tuple[str, float], list[float]]] = field(
        default_factory=lambda: {"idle": {}, "congested": {}})
    compute: list[float] = field(default_factory=list)
    skews: list[float] = field(default_factory=list)
    codec: dict[str, list[float]] = field(default_factory=dict)
    job_facts: dict[str, Any] = field(default_factory=dict)

    def add_run(self, run: Path) -> None:
        spans = _phase_times(run / "events.csv")
        cfg = json.loads((run / "config.json").read_text())
        world = int(cfg.get("world_size") or 2)
        steps: dict[int, list[dict[str, str]]] = {}
        with open(run / "steps.csv") as fh:
            for row in csv.DictReader(fh):
                steps.setdefault(int(row["step"]), []).append(row)
        for rows in steps.values():
            if len(rows) >= world:
                self.add_step(rows, spans, world)

    def add_step(self, rows: list[dict[str, str]], spans: list[tuple[float, float]], world: int) -> None:
        r0 = next(r for r in rows if r["rank"] == "0")
        t = float(r0["t"])
        phase = "congested" if any(a + 0.3 <= t <= b for a, b in spans) else (
            "idle" if all(not (a - 0.3 <= t <= b + 0.6) for a, b in spans) else None)
        level = r0["level"]
        comm = [float(r["comm_s"]) for r in rows]
        dense = float(r0["bytes_dense"])
        self.job_facts.setdefault("dense_bytes", dense)
        self.job_facts.setdefault("world_size", world)
        ratio = float(r0.get("ratio") or 1.0)
        d = Decision(level, ratio if level == "topk" else 1.0)
        kind = "allgather" if level in GATHERED else "allreduce"
        x = dense * bytes_ratio(d.level, d.ratio) * (max(1.0, world / 2) if kind == "allgather" else 1.0)
        if phase is not None:
            self.per[phase].setdefault((kind, round(x, -2)), []).append(sum(comm) / len(comm))
        self.skews.append(abs(comm[0] - comm[1]) if len(comm) > 1 else 0.0)
        self.compute.append(float(r0["compute_s"]) - float(r0.get("codec_s") or 0.0))
        self.codec.setdefault(level, []).append(float(r0.get("codec_s") or 0.0))


def fit_runs(run_dirs: Sequence[Path | str]) -> ReplayModel:
    """A :class:`ReplayModel` from on/off run folders (rank-mean values per step)."""
    data = _FitData()
    for run in map(Path, run_dirs):
        data.add_run(run)
    per, compute, skews, codec, job_facts = data.per, data.compute, data.skews, data.codec, data.job_facts
    rel: list[float] = []
    spikes: list[float] = []
    if not per["idle"] or not per["congested"]:
        raise ValueError("fit_runs: need steps in both idle and congested phases")
    phases = {}
    for phase, groups in per.items():
        pts = [(k, x, _median(v)) for (k, x), v in groups.items() if len(v) >= 2]
        for (_k, _x), v in groups.items():
            if len(v) >= 4:
                m = _median(v)
                rel.extend(abs(y - m) / m for y in v if m > 0)
                spikes.extend(1.0 if y > 3 * m else 0.0 for y in v)
        phases[phase] = pts
    smallest = min(y for pts in phases.values() for _, _, y in pts)
    idle, g_idle, _ = _fit_phase(phases["idle"], latency=0.5 * smallest)
    cong, _g_cong, _ = _fit_phase(phases["congested"], latency=idle.latency)
    c_med = _median(compute)
    rel_c = _median([abs(c - c_med) / c_med for c in compute]) if c_med > 0 else 0.0
    # The spread of comm times: idle all-gathers (short, fixed-cost transfers) show the
    # busy host's scheduling delay, a fixed U(0, d) (MAD d/4); idle allreduces (long
    # transfers) what grows with the time, U(1 - j, 1 + j) (MAD j/2 x the median).
    small = [d for (k, _x), v in per["idle"].items() if k == "allgather" and len(v) >= 4
             for d in [_median([abs(y - _median(v)) for y in v])]]
    large = [d / m for (k, _x), v in per["idle"].items() if k == "allreduce" and len(v) >= 4
             for m in [_median(v)] for d in [_median([abs(y - m) for y in v])] if m > 0]
    beta = _median(small) if small else 0.0
    alpha = _median(large) if large else _median(rel)
    noise = {"jitter": round(min(0.5, 2 * alpha), 4), "delay_s": round(4 * beta, 5),
             "spike_prob": round(sum(spikes) / max(1, len(spikes)), 4),
             "spike_s": round(5 * idle.latency + 0.002, 5),
             "compute_jitter": round(min(0.5, 2 * rel_c), 4)}
    job = Job(dense_bytes=job_facts["dense_bytes"], world_size=job_facts["world_size"],
              compute_s=round(c_med, 6), gather_fixed_s=round(g_idle, 6),
              skew_s=round(2 * _median(skews), 6),
              codec_s={k: round(min(v), 6) if k in ("none",) else round(_median(v), 6)
                       for k, v in codec.items()} | {"none": 0.0})
    return ReplayModel(job, idle, cong, noise, tuple(str(p) for p in run_dirs))
