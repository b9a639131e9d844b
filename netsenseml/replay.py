"""Replays a synthetic link through an adaptive policy, as the DDP hook would drive it.

No torch, no network: a what-if tool for the policies of ``netsenseml.policy`` and
``netsenseml.paper_rule`` (the tests and ``benchmarks/policy_response.py`` use it).

The link model of one step: the job sends its gradient in ``buckets`` equal collectives,
one after another. A collective of ``b`` bytes handed to torch.distributed takes
``latency + queue + b x g / rate`` seconds, where ``rate`` is the bandwidth share the job
gets (bytes/s of fp32-allreduce-equivalent traffic), ``queue`` the standing queue that
competing traffic builds (0 on an idle link), and ``g`` = world/2 for all-gathered levels
(int8, top-k; see ``netsenseml.policy``). Noise (seeded): ``jitter`` multiplies every
collective's time by a uniform factor in ``[1 - jitter, 1 + jitter]``, and with
probability ``spike_prob`` a collective is delayed by ``spike_s`` x U(0.5, 1.5) more (the
emulated links show such one-sided spikes: CPU contention, a retransmission), and
``delay_s`` adds U(0, delay_s) to every collective (the scheduling noise of a busy host,
which hides a small payload's transfer). ``compute_jitter`` multiplies each step's compute
and codec time by U(1 - compute_jitter, 1 + compute_jitter) (a busy host: the real runs
show +-15 % on both compute and communication). ``Job.gather_fixed_s`` adds a fixed time to
every all-gathered collective (on the emulated links an all-gather costs milliseconds more
than an allreduce of the same bytes; the registration probe sees it, see ``calibration``).
Communication hides behind the backward pass for up to ``hidden_s`` seconds (the time
from the first bucket's launch to the last's); the last bucket's collective is always
exposed. Compute and codec times are the job's, codec per level as given.

The step loop is the hook's: a step's observation reaches the policy when the next step's
bucket 0 completes, and the decision applies from the step after that (two steps of lag);
the first two steps use the policy's initial decision (the probe's, for NetSensePolicy).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from netsenseml.paper_rule import PaperRule
from netsenseml.policy import (
    GATHERED,
    Calibration,
    Decision,
    NetSensePolicy,
    Observation,
    bytes_ratio,
)


@dataclass(frozen=True)
class Link:
    """What the network offers the job during one step."""

    rate: float  # bytes/s of the job's share
    latency: float = 2e-4  # seconds per collective
    queue: float = 0.0  # seconds of standing queue per collective


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
    gather_fixed_s: float = 0.0  # extra seconds per all-gathered collective (see module doc)


@dataclass(frozen=True)
class Step:
    """One replayed step: what it sent and what it took."""

    step: int
    decision: Decision
    link: Link
    comm_s: float
    step_s: float
    bytes_sent: float
    model: tuple[float, float] = (0.0, 0.0)  # NetSensePolicy's (a, beta) after this step


def calibration(job: Job, link: Link) -> Calibration:
    """What the registration probe would measure on ``link`` (no jitter)."""
    return Calibration(
        dense_bytes=job.dense_bytes,
        world_size=job.world_size,
        latency_s=link.latency + link.queue,
        s_per_byte=1.0 / link.rate,
        codec_s=dict(job.codec_s),
        topk_bytes_per_element=job.topk_bytes_per_element,
        gather_latency_s=link.latency + link.queue + job.gather_fixed_s,
    )


def _run_step(
    policy: NetSensePolicy | PaperRule | None,
    job: Job,
    link: Link,
    decision: Decision,
    rng: random.Random,
    clock: float,
    jitter: float = 0.0,
    spike_prob: float = 0.0,
    spike_s: float = 0.0,
    delay_s: float = 0.0,
    compute_jitter: float = 0.0,
) -> tuple[Observation, float]:
    """One step of ``decision`` on ``link``: its observation and its period."""
    handed = job.dense_bytes * bytes_ratio(decision.level, decision.ratio, job.topk_bytes_per_element)
    g = max(1.0, job.world_size / 2) if decision.level in GATHERED else 1.0
    per_bucket = handed / job.buckets
    comm = 0.0
    for _ in range(job.buckets):
        noise = 1.0 + rng.uniform(-jitter, jitter) if jitter else 1.0
        fixed = link.latency + link.queue + (job.gather_fixed_s if decision.level in GATHERED else 0.0)
        seconds = (fixed + per_bucket * g / link.rate) * noise
        if spike_prob and rng.random() < spike_prob:
            seconds += spike_s * rng.uniform(0.5, 1.5)
        if delay_s:
            seconds += rng.uniform(0.0, delay_s)
        comm += seconds
        if isinstance(policy, PaperRule):
            policy.add(per_bucket, seconds, clock + comm)
    codec = job.codec_s.get(decision.level, 0.0)
    compute = job.compute_s
    if compute_jitter:
        compute *= 1.0 + rng.uniform(-compute_jitter, compute_jitter)
        codec *= 1.0 + rng.uniform(-compute_jitter, compute_jitter)
    exposed = max(comm / job.buckets, comm - job.hidden_s)
    congested, samples = policy.take_counts() if isinstance(policy, PaperRule) else (0, 0)
    obs = Observation(
        decision=decision,
        comm_s=comm,
        exposed_s=exposed,
        compute_s=compute + codec,
        codec_s=codec,
        bytes_sent=handed,
        collectives=job.buckets,
        overlap_s=job.hidden_s if job.buckets > 1 else 0.0,
        congested=congested,
        samples=samples,
    )
    return obs, compute + codec + exposed


def replay(
    policy: NetSensePolicy | PaperRule,
    job: Job,
    links: Iterable[Link],
    *,
    jitter: float = 0.0,
    spike_prob: float = 0.0,
    spike_s: float = 0.0,
    delay_s: float = 0.0,
    compute_jitter: float = 0.0,
    seed: int = 0,
) -> list[Step]:
    """Runs one step per entry of ``links``; calibrates a NetSensePolicy on the first link."""
    links = list(links)
    if isinstance(policy, NetSensePolicy) and policy.calibration is None:
        policy.calibrate(calibration(job, links[0]))
    rng = random.Random(seed)
    decision = policy.decision
    prev: Observation | None = None
    clock = 0.0
    out = []
    for i, link in enumerate(links, 1):
        # Bucket 0 of this step carries the previous step's observation; the decision
        # it yields applies from the next step.
        pending = policy.observe(prev) if prev is not None else None
        prev, period = _run_step(policy, job, link, decision, rng, clock, jitter, spike_prob, spike_s, delay_s,
                                 compute_jitter)
        clock += period
        model = (policy.a, policy.beta) if isinstance(policy, NetSensePolicy) else (0.0, 0.0)
        out.append(Step(i, decision, link, prev.comm_s, period, prev.bytes_sent, model))
        if pending is not None:
            decision = pending
    return out


def step_seconds(job: Job, link: Link, decision: Decision) -> float:
    """Seconds of one noise-free step of ``decision`` on ``link``."""
    return _run_step(None, job, link, decision, random.Random(0), 0.0)[1]


def informed(job: Job, link: Link, **policy_options: object) -> NetSensePolicy:
    """A NetSensePolicy that knows ``link`` exactly: shown one noise-free step at each end
    of the ladder, which its fit solves exactly. Its ``cost`` is then the true ``J``."""
    policy = NetSensePolicy(**policy_options)  # type: ignore[arg-type]
    policy.calibrate(calibration(job, link))
    for d in (Decision("none"), Decision("topk", policy.floor)):
        policy.observe(_run_step(None, job, link, d, random.Random(0), 0.0)[0])
    return policy


def oracle(job: Job, link: Link, **policy_options: object) -> Decision:
    """The decision NetSensePolicy's objective takes with the link known exactly."""
    return informed(job, link, **policy_options).best()


def changes(steps: list[Step]) -> int:
    """How many times the decision changed between consecutive steps (probes left out)."""
    kept = [s for s in steps if not s.decision.probe]
    return sum(1 for a, b in zip(kept, kept[1:], strict=False) if a.decision != b.decision)


def level_changes(steps: list[Step]) -> int:
    """How many times the level (none / fp16 / int8 / topk) changed (probes left out)."""
    kept = [s for s in steps if not s.decision.probe]
    return sum(1 for a, b in zip(kept, kept[1:], strict=False) if a.decision.level != b.decision.level)
