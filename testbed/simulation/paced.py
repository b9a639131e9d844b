"""A paced emulated run, simulated: the same inputs, the same step, SimGrid's network.

Issue 52, part 1. A payload-mode run (``workload.grads: payload``) measures what a step
of DDP with a method costs on a network; its inputs are files and registries, not
values. This module feeds the SimGrid engine (``testbed.simulation.sim``) exactly those
inputs, read from the run's own ``config.json`` where the run recorded them:

* **compute and codec**: the accelerator timing the run was paced by (``config.json``'s
  ``accelerator.timing``: forward, backward, optimizer seconds and codec seconds per fp32
  MB per level), or a profile entry (``netsenseml.accelerator``) for a run not made yet;
* **DDP's bucket layout**: ``workloads.payload.layout``'s output for the model, shipped in
  ``layouts.json`` and read through ``advise.load_workload`` (the same path ``netsense
  advise`` takes; a model the file lacks is computed in a child process, never torch here).
  The first step is DDP's first iteration: one bucket of the whole gradient (DDP builds
  its buckets after it; every payload run's ``steps.csv`` shows 1 collective in step 1);
* **each method's bytes and collectives**: ``advise.sends`` (the method registry's
  ``wire`` and ``reduction``; PowerSGD's three allreduces per bucket from the parameter
  shapes, from the first step, as ``netsenseml.payload.powersgd_hook`` sends them: payload
  mode has no dense start, ``methods.PAYLOAD_DENSE_STEPS``); ``tests/simulation/test_paced.py``
  holds them equal to each codec's ``wire()`` sizes, per bucket;
* **the topology and timeline**: the run's star, dumbbell or leaf-spine
  (``calibrate.fabric_of``, ``platform.build``: one simplex link per direction at the
  configured virtual rate, each shaped as HTB shapes it) and its timeline's iperf3 streams
  (``cross_start``/``cross_stop``: competing bulk flows from the end of the first step,
  ``timeline_origin: first_step``; each a fair flow, the standing queue ``queue_pkts`` full
  frames: the engine's uncalibrated defaults). Rate changes, ramps and traces are refused
  (not simulated yet);
* **the dilation factor k**: the emulation runs the link at rate / k and every host part
  k times slower, and reads its clock divided by k. The simulation runs on the virtual
  clock, so the rate is the configured one, but whatever the emulating host does in real
  time shrinks by k: the HTB bucket holds ``burst_bytes(rate / k)`` (its real rate's 2 ms)
  and refills at the virtual rate; a message's fixed real cost is ``1/k`` in virtual time.

**The step is the pacer's** (``netsenseml.accelerator.Pacer``): bucket ``i`` is released
at ``forward + backward x f_i + codec of the buckets before it``, its codec runs, its
collectives are launched; they cross the network one after another (one ring at a time:
two collectives sharing the links under max-min finish the later one no earlier); the
backward returns when the last has completed and its own time has passed; the optimizer
follows, and the next step starts. Each collective is the ring the engine simulates
(``sim._Simulation.collective``: allreduce 2 (W-1) phases of B/W, all-gather W-1 phases
of B, each phase waiting for its slowest link).

**Nothing is fitted.** The goodput: TCP over the emulated 1500-byte MTU carries 1448
payload bytes in each 1514-byte frame HTB counts (``GOODPUT``: SimGrid's bandwidth
factor). A ring message's fixed cost on the host: ``HOP_REAL_S`` real seconds (a
measured gloo figure, not these runs'), ``1/k`` of it on the virtual clock, charged once
a ring phase (``sim.message_cpu_s``). No run the validation compares with
(``benchmarks/sim_paper_grid.py``) set any number here.

**Adaptive methods run their real policy in the one step loop** (``netsenseml.loop``),
built as the run builds it (``methods.resolve(method).build()``, NetSenseML with the
run's convergence prior), fed what the hook feeds it: the registration calibration (one-element
allreduces, one-byte all-gathers, the fastest of three 1 MiB allreduces, each after a
one-element allreduce) where the policy needs it; per step the ``StepTimer``'s
measurements (period, busy comm, exposed comm, overlap, codec, bytes, collectives); the
monitor's samples as ``netsenseml.comm.CommRecorder`` makes them (payloads in flight
together are one period, fp32-allreduce-equivalent bytes; the RTT probe beside bucket 0
where due), and for the prototype's rule (``netsenseml-paper``, ``takes_samples``) each
collective's (bytes handed, launch to completion) at its completion time.
Simulated: ``SIMULATED`` (NetSenseML, the prototype's rule, StellaTrain). Not: Accordion
(``needs_values``: it decides from gradient norms, which neither a payload run nor a
simulation has), comm-hook and compressor plug-ins (their bytes are their own code's).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from netsenseml import accelerator, convergence, methods
from netsenseml.dilation import Dilation
from netsenseml.loop import Measured, StepLoop
from netsenseml.monitor import NetworkMonitor
from netsenseml.policy import Calibration
from testbed.simulation import advise, engine
from testbed.simulation.calibrate import cross_flows, fabric_of
from testbed.simulation.platform import Fabric
from testbed.simulation.sim import Compute, CrossFlow, Job, NetCalibration, StepRecord, _Simulation
from topologies.shaping import burst_bytes

#: TCP payload per byte HTB counts: 1448 of a 1514-byte frame (MSS at MTU 1500 with
#: timestamps; HTB charges each GSO segment its own headers).
GOODPUT = 1448 / 1514
#: The adaptive methods simulated (module docstring), and why the others are not.
SIMULATED = ("netsenseml", "netsenseml-paper", "stellatrain")
NOT_SIMULATED = {"accordion": "it decides from gradient norms, which a simulation has none of"}
TINY_BYTES = 64  # the recorder's tiny collectives (netsenseml.comm: the RTT probe)
CALIBRATION_BYTES = 1 << 20
CALIBRATION_REPEATS = 3
#: One ring message's fixed real cost on the emulating host (gloo, syscalls, wake-ups), s;
#: divided by k on the virtual clock. Not fitted: ``benchmarks/collective_floor.py``'s
#: 4-byte gloo allreduce on loopback, 145 us at 2 ranks (2 messages) and 460 us at 4
#: (6 messages) on the build machine (DESIGN.md), is ~75 us a message.
HOP_REAL_S = 75e-6


@dataclass(frozen=True)
class PacedJob:
    """One paced run's inputs (module docstring)."""

    method: str
    workers: int
    rate_mbit: float
    timing: accelerator.Timing
    buckets: tuple[advise.Bucket, ...]
    batch_size: int
    dilation: float = 1.0
    steps: int = 6
    queue_pkts: int = 100
    convergence: str | None = None
    model: str = ""
    layout_origin: str = ""
    hop_real_s: float = HOP_REAL_S  # one ring message's fixed real cost on the emulating host
    topology: dict[str, Any] | None = None  # the run's (None: a star of ``rate_mbit``)
    cross: tuple[CrossFlow, ...] = ()  # its timeline's cross traffic, from the first step
    time_limit_s: float | None = None  # virtual seconds of training (instead of ``steps``)

    @property
    def elements(self) -> int:
        return sum(b.elements for b in self.buckets)

    @property
    def bottleneck_mbit(self) -> float:
        """The rate the ring's bottleneck runs at (a dumbbell's bottleneck, a star's links)."""
        topo = self.topology or {}
        return float(topo.get("bottleneck_mbit") or self.rate_mbit)

    def fabric(self) -> Fabric:
        fab = (fabric_of(self.topology, self.workers) if self.topology is not None
               else Fabric("star", self.workers, self.rate_mbit, queue_pkts=self.queue_pkts))
        if fab is None:
            raise ValueError(f"topology {self.topology.get('kind')!r}: the paced simulation "  # type: ignore[union-attr]
                             "reads star, dumbbell and leaf-spine runs")
        return replace(fab, link_latency_s=0.0)

    @property
    def time_dilation(self) -> Dilation:
        """The run's dilation as a value (a factor below 1 read as none)."""
        return Dilation(max(self.dilation, 1.0))

    def net(self) -> NetCalibration:
        """SimGrid's factors: the goodput, and the message's real cost on the virtual clock."""
        return NetCalibration(bandwidth_factor=GOODPUT,
                              msg_fixed_s=self.time_dilation.virtual_s(self.hop_real_s))


def check_method(method: str) -> None:
    """ValueError (one line) for a method the paced simulation cannot run."""
    spec = methods.parse(method)
    if spec.name in NOT_SIMULATED:
        raise ValueError(f"method {method!r}: not simulated ({NOT_SIMULATED[spec.name]})")
    if spec.plugin or (spec.kind == "adaptive" and spec.name not in SIMULATED):
        raise ValueError(f"method {method!r}: not simulated (its bytes or decisions are its "
                         "own code's)")
    if spec.kind == "compressor" and methods.get(spec.name).wire is None:
        raise ValueError(f"method {method!r}: no wire size in the method registry")


def from_run(run_dir: Path) -> PacedJob:
    """The inputs of the run in ``run_dir`` (its ``config.json``), as the run had them."""
    cfg = json.loads((run_dir / "config.json").read_text())
    return from_config(cfg, _start_record(run_dir), str(run_dir))


def from_config(cfg: dict[str, Any], start: dict[str, Any] | None = None,
                where: str = "config") -> PacedJob:
    """The inputs a run's ``config.json`` holds (``scenario``, ``method``, ``world_size``,
    ``accelerator``: mode, timing, profile, dilation) and its rank-0 ``start`` record (the
    model's knobs and context; {} or None: the profile entry's); ValueError (one line,
    naming ``where``) for what the paced simulation cannot run."""
    sc = cfg["scenario"]
    topo, wl, acc = sc["topology"], sc["workload"], cfg.get("accelerator") or {}
    if acc.get("mode") != "paced":
        raise ValueError(f"{where}: not a paced run (no accelerator timing)")
    kinds = {ev.get("kind") for ev in sc.get("timeline") or []} - {"cross_start", "cross_stop"}
    if kinds:
        raise ValueError(f"{where}: timeline events {sorted(kinds)} are not simulated "
                         "(cross_start/cross_stop are)")
    start = start or {}
    work = advise.load_workload(wl["model"], profile=acc.get("profile") or advise.DEFAULT_PROFILE,
                                dataset=wl["dataset"], batch_size=int(wl["batch_size"]),
                                knobs=start.get("knobs"), context=int(start.get("context") or 128))
    method = str(cfg["method"])
    check_method(method)
    job = PacedJob(method=method, workers=int(cfg.get("world_size") or topo["n_workers"]),
                   rate_mbit=float(topo.get("rate_mbit") or topo.get("access_mbit") or 0.0),
                   timing=accelerator.Timing.from_json(acc["timing"]), buckets=work.buckets,
                   batch_size=int(wl["batch_size"]), dilation=float(acc.get("dilation") or 1.0),
                   steps=int(wl["steps"] or 0), queue_pkts=int(topo.get("queue_pkts", 100)),
                   convergence=sc.get("convergence"), model=wl["model"],
                   layout_origin=work.layout_origin, topology=dict(topo),
                   cross=cross_flows(sc.get("timeline") or []),
                   time_limit_s=None if wl.get("steps") else wl.get("time_limit_s"))
    job.fabric()  # refuses a topology the platform has not
    return job


def _start_record(run_dir: Path) -> dict[str, Any]:
    """Rank 0's start record (the model's knobs and context as the run built it); {} where
    the run has none."""
    try:
        return dict(json.loads((run_dir / "start.json").read_text()))
    except (OSError, ValueError, TypeError):
        return {}


# ----------------------------------------------------------------------------- one step's plan
@dataclass(frozen=True)
class BucketPlan:
    """One bucket of one step: when the pacer releases it, its codec, its collectives."""

    release_s: float  # after the step's start
    codec_s: float
    parts: tuple[tuple[str, float], ...]


def step_plan(job: PacedJob, step: int, method: str | methods.MethodSpec) -> list[BucketPlan]:
    """Step ``step`` (1-based) of ``method`` (a fixed method, or an adaptive one's level as
    a method): DDP's first step one bucket, then the layout's."""
    t = job.timing
    if step == 1:
        shapes = tuple(s for b in job.buckets for s in b.shapes)
        buckets: tuple[advise.Bucket, ...] = (advise.Bucket(job.elements, shapes),)
    else:
        buckets = job.buckets
    spec = methods.as_spec(method)
    dense = step <= spec.payload_dense_steps  # a payload run's PowerSGD: none
    label = advise.codec_label(spec)
    out, seen, codec_before = [], 0, 0.0
    for b in buckets:
        seen += b.elements
        release = t.forward_s + t.backward_s * min(1.0, seen / job.elements) + codec_before
        c = 0.0 if dense else t.codec_s(label, 4 * b.elements)
        codec_before += c
        parts = ((("allreduce", 4.0 * b.elements),) if dense
                 else advise.sends(spec, b).parts)
        out.append(BucketPlan(release, c, tuple(p for p in parts if p[1] > 0)))
    return out


# ----------------------------------------------------------------------------- samples
@dataclass
class Coll:
    """One collective of a step as the recorder sees it (virtual seconds)."""

    launch: float
    done: float
    nbytes: float
    equiv: float


def period_samples(colls: list[Coll], last_done: float) -> list[tuple[float, float, float]]:
    """``netsenseml.comm.CommRecorder``'s samples (service time): payloads in flight
    together are one period from the later of its first launch and the last completion
    before it, to its last completion; a tiny collective its own sample. Returns
    ``(at, equiv bytes, seconds)`` in completion order."""
    events = sorted([(c.launch, 0, i) for i, c in enumerate(colls)]
                    + [(c.done, 1, i) for i, c in enumerate(colls)], key=lambda e: (e[0], -e[1]))
    out, open_n, start, nbytes = [], 0, 0.0, 0.0
    for t, kind, i in events:
        c = colls[i]
        tiny = c.nbytes <= TINY_BYTES
        if kind == 0 and not tiny:
            if open_n == 0:
                start, nbytes = max(t, last_done), 0.0
            open_n += 1
            nbytes += c.equiv
        elif kind == 1:
            if tiny:
                out.append((t, c.equiv, t - max(c.launch, last_done)))
            else:
                open_n -= 1
                if open_n == 0:
                    out.append((t, nbytes, t - start))
            last_done = max(last_done, t)
    return out


def measured(colls: list[Coll], period: float, codec: float) -> Measured:
    """The ``StepTimer``'s measurements of one step (``netsenseml.state``)."""
    spans = sorted((c.launch, c.done) for c in colls)
    busy, end = 0.0, -math.inf
    for a, b in spans:
        busy += max(0.0, b - max(a, end))
        end = max(end, b)
    last_done = max(c.done for c in colls)
    last_launch = max(c.launch for c in colls)
    exposed = max(0.0, last_done - last_launch)
    return Measured(comm_s=busy, exposed_s=exposed, compute_s=max(period - exposed, 1e-6),
                    codec_s=codec, bytes_sent=sum(c.nbytes for c in colls),
                    collectives=float(len(colls)),
                    overlap_s=max(0.0, last_launch - min(c.launch for c in colls)))


# ----------------------------------------------------------------------------- the simulation
#: An adaptive decision (level label, ratio) as the fixed method that sends the same, a spec.
level_method = methods.at_level


def warmup_steps(method: str | methods.MethodSpec) -> int:
    """The leading steps a method declares its warm-up, which a run marks and its
    throughput leaves out (``netsenseml.state``: PowerSGD's dense steps, none in payload
    mode, which this simulates)."""
    return methods.as_spec(method).payload_dense_steps


@dataclass
class PacedResult:
    steps: list[StepRecord]
    wall_s: float
    calibration: dict[str, float] = field(default_factory=dict)  # what it measured
    warmup: int = 0  # leading steps of the method's warm-up (``warmup_steps``)

    def throughput(self, batch_size: int, workers: int, warmup: int | None = None
                   ) -> float | None:
        """Samples/s as ``testbed.common.metrics.throughput`` reads a run: the steps after
        the first steady one (after the first step and the ``warmup`` leading ones, this
        result's own by default) over the time from its end to the last's. A run made
        before its method's warm-up was marked counted it: ``warmup=0`` reads it so."""
        skip = self.warmup if warmup is None else warmup
        ends = [s.t + s.step_s for s in self.steps][skip:]
        if len(ends) < 2 or ends[-1] <= ends[0]:
            return None
        return (len(ends) - 1) * batch_size * workers / (ends[-1] - ends[0])


class _Paced(_Simulation):
    """The engine's ring, HTB buckets and links under the pacer's step (module docstring)."""

    def __init__(self, job: PacedJob) -> None:
        self.paced = job
        super().__init__(Job(job.fabric(), "allreduce", 4.0 * job.elements, job.batch_size,
                             Compute({"none": 0.0}), job.net(), steps=job.steps))
        d = job.time_dilation
        self.buckets.size = {key: float(burst_bytes(d.real_mbit(mbit)))
                             for key, mbit in self.built.shaped.items()}
        self.buckets.tokens = dict(self.buckets.size)

    def controller(self) -> None:
        """The run's steps (its step count or time limit); its cross traffic from the end
        of the first step (``timeline_origin: first_step``); then every bulk flow ends."""
        job = self.paced
        spec = methods.parse(job.method)  # the job's text enters here, once
        loop = _start_loop(spec, job, self.calibration, self.timed) if spec.name in SIMULATED else None
        origin = last_done = self.e.clock
        step = 0
        while not self.finished_paced(step, origin):
            step += 1
            if loop is not None:
                d = loop.next_step()
                method, level, ratio = methods.at_level(d.level, d.ratio), d.level, d.ratio
            else:
                method, level, ratio = spec, spec.level, spec.ratio or 1.0
            t0 = self.e.clock
            colls, codec, end = self.run_step(step, method, loop, t0)
            self.out.append(StepRecord(step, t0 - origin, end - t0 - codec, 0.0, end - t0, level,
                                       ratio, sum(c.nbytes for c in colls), str(method), 0))
            if loop is not None:
                self.feed(loop, colls, last_done, end - t0, codec)
            last_done = max(c.done for c in colls)
            if step == 1:
                for flow in job.cross:
                    self.sg.Actor.create(f"cross-{flow.src}-{flow.dst}", self.hosts[0],
                                         self.cross_actor, flow, end)
        self.end_flows()
        self.sg.this_actor.exit()

    def finished_paced(self, step: int, origin: float) -> bool:
        job = self.paced
        if job.time_limit_s is not None:
            return step > 0 and self.e.clock - origin >= job.time_limit_s
        return step >= job.steps

    def run_step(self, step: int, method: methods.MethodSpec, loop: StepLoop | None,
                 t0: float) -> tuple[list[Coll], float, float]:
        """One paced step from ``t0``: its collectives, its codec seconds, its end."""
        t = self.paced.timing
        plan = step_plan(self.paced, step, method)
        colls: list[Coll] = []
        probe: list[Coll] = []
        actor = None
        for i, b in enumerate(plan):
            launch = t0 + b.release_s + b.codec_s
            self.sg.this_actor.sleep_until(max(launch, self.e.clock))
            if i == 0 and loop is not None and loop.rtt_probe_due():
                actor = self.sg.Actor.create("rtt-probe", self.hosts[0], self.rtt_probe, probe)
            for kind, size in b.parts:  # PowerSGD's next launched as the one before completed
                self.collective(kind, size)
                equiv = size * (max(1.0, self.w / 2) if kind == "allgather" else 1.0)
                colls.append(Coll(launch, self.e.clock, size, equiv))
                launch = self.e.clock
        if actor is not None:
            actor.join(-1)
            colls.extend(probe)
        codec = sum(b.codec_s for b in plan)
        backward_end = max(t0 + t.forward_s + t.backward_s + codec, max(c.done for c in colls))
        self.sg.this_actor.sleep_until(backward_end + t.optimizer_s)
        return colls, codec, self.e.clock

    def rtt_probe(self, out: list[Coll]) -> None:
        t = self.e.clock
        self.collective("allreduce", 4.0)
        out.append(Coll(t, self.e.clock, 4.0, 4.0))

    def feed(self, loop: StepLoop, colls: list[Coll], last_done: float, period: float,
             codec: float) -> None:
        """The step's samples to the monitor (or the rule), its measurements to the loop."""
        if loop.policy.takes_samples:
            for c in sorted(colls, key=lambda c: c.done):
                loop.policy.add(c.nbytes, c.done - c.launch, c.done)  # type: ignore[attr-defined]
        else:
            for _, nbytes, seconds in period_samples(colls, last_done):
                loop.monitor.add(nbytes, seconds)
        loop.end_step(measured(colls, period, codec))


def _start_loop(spec: methods.MethodSpec, job: PacedJob, calibration: dict[str, float],
                timed: Any) -> StepLoop:
    """The run's policy, built as the hook builds it, in its step loop; the registration
    calibration simulated where the policy needs it (``netsenseml.calibration.measure_calibration``)."""
    resolved = methods.resolve(spec)
    options = {"prior": convergence.load(job.convergence)} if spec.reads_prior else {}
    loop = StepLoop(resolved.build(**options), NetworkMonitor())
    if not loop.policy.needs_calibration:
        return loop
    lat = min(timed("allreduce", 4.0) for _ in range(CALIBRATION_REPEATS))
    glat = min(timed("allgather", 1.0) for _ in range(CALIBRATION_REPEATS))
    n = max(1, min(job.elements, CALIBRATION_BYTES // 4))
    secs = []
    for _ in range(CALIBRATION_REPEATS):
        timed("allreduce", 4.0)
        secs.append(timed("allreduce", 4.0 * n))
    s_per_byte = max(min(secs) - lat, 0.1 * min(secs)) / (4 * n)
    dense = 4 * job.elements
    half = loop.policy.half_level
    codec = {"none": 0.0, half: job.timing.codec_s(half, dense),
             "int8": job.timing.codec_s("int8", dense), "topk": job.timing.codec_s("topk", dense)}
    calibration.update(latency_s=lat, gather_latency_s=glat, s_per_byte=s_per_byte)
    loop.calibrate(Calibration(dense_bytes=float(dense), world_size=job.workers, latency_s=lat,
                               s_per_byte=s_per_byte, codec_s=codec, topk_bytes_per_element=8.0,
                               gather_latency_s=glat))
    return loop


def simulate(job: PacedJob) -> PacedResult:
    """``job`` in this process's (fresh) SimGrid engine; see :func:`simulate_isolated`."""
    wall0 = time.perf_counter()
    s = _Paced(job)
    s.sg.Actor.create("controller", s.hosts[0], s.controller)
    s.e.run()
    return PacedResult(s.out, time.perf_counter() - wall0, s.calibration, warmup_steps(job.method))


def _simulate_dict(job: PacedJob) -> dict[str, Any]:
    r = simulate(job)
    return {"steps": [vars(s) for s in r.steps], "wall_s": r.wall_s, "calibration": r.calibration,
            "warmup": r.warmup}


def simulate_isolated(jobs: list[PacedJob], workers: int = 1) -> list[PacedResult]:
    """Each job in a fresh process (a SimGrid engine runs once per process)."""
    return [PacedResult([StepRecord(**s) for s in d["steps"]], d["wall_s"], d["calibration"],
                        d["warmup"])
            for d in engine.run_isolated(_simulate_dict, jobs, workers)]

