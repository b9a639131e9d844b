"""``netsense advise``: which gradient method pays for *this* job on *this* network, by how
much, how sure, and at which rates the answer changes.

Why the closed form and not SimGrid: the answer must come in <= 10 s for any built-in
model up to 1024 workers, for every method, *and* for a search over rates (the crossover
rates). One SimGrid point at 1024 workers takes 12-21 s on the build machine
(``benchmarks/sim_scale.py``), so SimGrid cannot answer even one method in time; the
closed form (``testbed.simulation.model``: ``comm = L x alpha + V x 8 / (eta x share x R)``
per ring collective) answers a method in microseconds, so a search over ~100 rates of
every method fits. What the closed form gives up is what SimGrid adds: HTB's bucket, a
standing queue behind bulk streams, per-message CPU on a contended host -- the emulating
machine's effects, not a cluster's.

The inputs are those of a paced emulated run (issue 52 part 1, the part advise needs):

* **compute and codec** from an accelerator profile entry (``netsenseml.accelerator``:
  forward, backward, optimizer seconds; codec seconds per fp32 MB per level);
* **DDP's bucket layout** (``workloads.payload.layout``, via ``workloads.bucket_layout``):
  for the shipped models from ``layouts.json`` (its output, checked against it by
  ``tests/simulation/test_advise.py``), else by running it as a child process
  (torch's import and a meta-device model, ~2-6 s), never torch in this process;
* **each method's bytes** from the method registry (``wire`` x each bucket's fp32 bytes;
  top-k and DGC: values + int32 indices per kept element) and its collective
  (``reduction``: ring allreduce or ring all-gather); PowerSGD's three allreduces per
  bucket from its parameter shapes, as torch's hook sizes them (``powersgd_sizes``).

A step is the pacer's (``netsenseml.accelerator``): bucket ``i`` is released at ``forward
+ backward x f_i`` plus the codec time of the buckets before it, its own codec runs, its
collective starts when it is launched and the link is free (collectives of one step share
the link one after another: max-min fair sharing finishes them no earlier), the backward
returns when the last collective has, then the optimizer. So communication hides behind
the backward as far as the layout lets it (VGG-16's 411 MB fc1 bucket fires late; GPT-2's
tied embedding last).

The adaptive methods the simulation runs (``sim.SIMULATED_ADAPTIVE``: NetSenseML,
StellaTrain) run their real policy in the hook's step loop (``netsenseml.loop.StepLoop``),
fed by the closed form's times: the registration calibration (one-element allreduce and
all-gather, a 1 MiB allreduce), each step's payload sample for the monitor, the RTT probe
where due. Their throughput is the mean over steps 2..``ADAPTIVE_STEPS`` as a paper-grid run
measures it. The prototype's rule (it times every collective on the real clock) and
Accordion (it reads gradient values) are not simulated (said in the answer).

The uncertainty is this closed form's own error against the emulated paper grid
(``results/simulation/advise-validation.csv``, written by ``benchmarks/advise_validation.py``
from every committed paper-grid run: payload mode, 8 emulated A100s): per method family
(:data:`FAMILIES`: what a method puts on the ring decides what the closed form gets right or
wrong), the worst held-out |throughput error| of the family's runs of the asked model, or
of every model's where the grid has none of it. A family the grid has no run of, and a
congested network (the grid's runs are idle), fall back to the SimGrid model's held-out
error on the small MLP at 20 Mbit/s (``validation-summary.csv``), said so in the answer.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netsenseml import accelerator, methods
from netsenseml.loop import Measured, StepLoop
from netsenseml.monitor import NetworkMonitor
from netsenseml.policy import Calibration as PolicyCalibration
from testbed.simulation.model import volume_and_messages
from workloads import registry

TOPOLOGIES = ("star", "dumbbell", "fattree")
DEFAULT_PROFILE = "a100-estimated"
#: The methods compared unless the caller names others: the paper-grid's systems (every
#: fixed level it runs) and the adaptive methods the simulation can run.
DEFAULT_METHODS = ("allreduce", "fp16", "int8", "topk:0.1", "topk:0.01", "topk:0.005",
                   "topk:0.001", "dgc:0.01", "powersgd:4", "netsenseml", "stellatrain")
ADAPTIVE = ("netsenseml", "stellatrain")
NOT_SIMULATED = {"netsenseml-paper": "it times every collective on the real clock",
                 "accordion": "it decides from gradient values, which a prediction has none of"}
ADAPTIVE_STEPS = 40  # as the paper-grid's adaptive runs
#: A built-in model's dataset when none is given: the one its profile entry was made for.
DEFAULT_DATASET = {"mlp": "mixture", "resnet18-imagenet": "cifar100-224-synth", "vgg16": "cifar100-224-synth",
                   "gpt2-small": "gpt2-synth"}
LAYOUTS = Path(__file__).with_name("layouts.json")
VALIDATION = Path(__file__).resolve().parents[2] / "results" / "simulation" / \
    "validation-summary.csv"
SIMCAL = VALIDATION.with_name("simcal.json")
#: The closed form against every committed paper-grid run (benchmarks/advise_validation.py).
PAPER_VALIDATION = VALIDATION.with_name("advise-validation.csv")
#: Rates searched for crossovers (Mbit/s): 1 Mbit/s to 400 Gbit/s.
SEARCH_MBIT = (1.0, 400_000.0)
SEARCH_POINTS = 64
BISECT_REL = 0.01  # a crossover is located to 1 % of its rate
#: Per-message latency of a ring step (s): assumed (a cluster's TCP over Ethernet with
#: gloo), stated with every answer. The SimGrid fit's per-message factors describe the
#: 2-core emulating machine (per-message CPU under contention), not a cluster.
ALPHA_S = 50e-6
#: Goodput share of the line rate, from first principles: TCP's payload in a full frame
#: (1448 of 1514 bytes with timestamps: 0.956), which one TCP flow through a shaped link
#: reaches and so does the 8-rank gloo ring on hosts running CUBIC
#: (results/simulation/ring-loss.md: 0.955 at 50-1000 Mbit/s real). Checked, not fitted,
#: on the paper grid's plain-allreduce runs (ResNet-18, 8 emulated A100s in payload mode,
#: star at 200-10000 Mbit/s, CUBIC hosts, commit de1af24); every other method of the grid
#: and every other model's run is held out (`benchmarks/advise_validation.py`). It was 0.92,
#: fitted on that star when its hosts ran BBR, whose ring kept 0.87-0.95 of the rate below
#: ~300 Mbit/s real, and before that 0.825 on recorded-gradient runs at 3-90 Mbit/s real.
ETA = 0.955
#: The runs ``ETA`` is checked on: the plain-allreduce runs under these trees (not held out).
ETA_FIT_RUNS = (Path("results") / "runs" / "paper-grid" / "resnet18-star",)
#: Two methods within this share of each other tie; the first in the caller's order wins
#: (an adaptive method that settles on a fixed level ties with that level).
TIE = 1e-3


class AdviseError(ValueError):
    """Bad input; ``str()`` is one line naming the field and what is allowed."""


# ----------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Bucket:
    """One DDP bucket: its fp32 elements and its parameters' shapes (firing order)."""

    elements: int
    shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Workload:
    """The job: model, per-worker batch, profiled times, DDP's buckets, and where each
    came from (``origin``: what the answer states as assumed or measured)."""

    model: str
    dataset: str
    batch_size: int
    timing: accelerator.Timing
    buckets: tuple[Bucket, ...]
    profile: str
    layout_origin: str
    params: int

    @property
    def elements(self) -> int:
        return sum(b.elements for b in self.buckets)


@dataclass(frozen=True)
class Network:
    """Where the ring runs: ``rate_mbit`` on its bottleneck hop (star: every access link;
    dumbbell: the bottleneck, access links assumed no slower; fat-tree: every link, leaf
    uplinks over-subscribed ``oversub`` times) and ``streams`` competing bulk flows there
    (star: into one worker's link; dumbbell: across the bottleneck; fat-tree: another
    job's flows per leaf through the uplinks). A ring moves at its slowest hop, so one
    congested hop slows every rank."""

    topology: str
    workers: int
    rate_mbit: float
    streams: int = 0
    hosts_per_leaf: int = 16
    workers_per_leaf: int = 8
    oversub: float = 4.0
    alpha_s: float = ALPHA_S
    eta: float = ETA
    stream_weight: float = 1.0  # shares of the hop one stream takes per ring flow

    def share(self) -> float:
        """The ring flow's share of ``rate_mbit`` on its bottleneck hop (max-min fair)."""
        comp = self.streams * self.stream_weight
        if self.topology == "fattree":
            if self.workers <= self.workers_per_leaf:
                return 1.0  # one leaf: the ring never leaves it
            uplinks = max(1, round(self.hosts_per_leaf / self.oversub))
            return min(1.0, uplinks / (1.0 + comp))
        return 1.0 / (1.0 + comp)

    def at(self, rate_mbit: float) -> Network:
        return Network(self.topology, self.workers, rate_mbit, self.streams,
                       self.hosts_per_leaf, self.workers_per_leaf, self.oversub,
                       self.alpha_s, self.eta, self.stream_weight)

    def collective_s(self, kind: str, nbytes: float) -> float:
        """One ring collective of ``nbytes`` (allreduce: the buffer; allgather: per rank)."""
        vol, msgs = volume_and_messages(kind, self.workers, nbytes)  # the closed form's V, L
        return msgs * self.alpha_s + vol * 8.0 / (self.rate_mbit * 1e6 * self.eta * self.share())


def load_workload(model: str, *, profile: str = DEFAULT_PROFILE, dataset: str | None = None,
                  batch_size: int | None = None, knobs: dict[str, Any] | None = None,
                  context: int = 128, layouts: Path = LAYOUTS) -> Workload:
    """The job's inputs (module docstring); AdviseError (one line) for what does not fit."""
    try:
        prof = accelerator.load(profile)
    except accelerator.ProfileError as exc:
        raise AdviseError(f"--profile: {exc}") from None
    entries = [e for e in prof.entries if e.model == model]
    if not entries:
        have = sorted({e.model for e in prof.entries})
        raise AdviseError(f"--model: {model!r} has no entry in profile {prof.name!r}; "
                          f"allowed: {', '.join(have)}")
    if batch_size is not None:
        entries = [e for e in entries if e.batch_size == batch_size]
        if not entries:
            raise AdviseError(f"--batch-size: profile {prof.name!r} has {model} at batch "
                              f"{', '.join(str(e.batch_size) for e in prof.entries if e.model == model)}"
                              f" only; got {batch_size}")
    entry = entries[0]
    if model not in registry.model_names():
        raise AdviseError(f"--model: {model!r} is not a registered model; allowed: "
                          f"{', '.join(registry.model_names())}")
    full_knobs = registry.model_entry(model).resolve_knobs({**entry.knobs, **(knobs or {})})
    dataset = dataset or DEFAULT_DATASET.get(model)
    if dataset is None or dataset not in registry.dataset_names():
        raise AdviseError(f"--dataset: {dataset!r} is not a registered dataset; allowed: "
                          f"{', '.join(registry.dataset_names())}")
    params = registry.param_count(model, full_knobs, dataset)
    buckets, origin = _layout(model, dataset, full_knobs, context, layouts)
    if params is not None and sum(b.elements for b in buckets) != params:
        raise AdviseError(f"--model: {model}'s layout has {sum(b.elements for b in buckets)} "
                          f"elements, its parameter count {params}: the layout file is stale")
    return Workload(model, dataset, entry.batch_size, entry.timing, buckets, prof.name, origin,
                    params if params is not None else sum(b.elements for b in buckets))


def _layout(model: str, dataset: str, knobs: dict[str, Any], context: int,
            layouts: Path) -> tuple[tuple[Bucket, ...], str]:
    """DDP's buckets: the shipped ``workloads.bucket_layout`` output where it has this
    model, else that module run as a child process (torch's import stays out of the CLI)."""
    if layouts.is_file():
        for lay in json.loads(layouts.read_text())["layouts"]:
            if (lay["model"], lay["dataset"], lay["knobs"]) == (model, dataset, knobs):
                return _buckets(lay), f"DDP's layout ({layouts.name}, torch {_torch_of(layouts)})"
    cmd = [sys.executable, "-m", "workloads.bucket_layout", model, dataset,
           "--knobs", json.dumps(knobs), "--context", str(context)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise AdviseError(f"--model: {last.removeprefix('error: ')}")
    return _buckets(json.loads(proc.stdout)), "DDP's layout (computed now: workloads.bucket_layout)"


def _torch_of(path: Path) -> str:
    return str(json.loads(path.read_text()).get("torch", "?"))


def _buckets(lay: dict[str, Any]) -> tuple[Bucket, ...]:
    return tuple(Bucket(int(b["elements"]), tuple(tuple(int(s) for s in sh) for sh in b["shapes"]))
                 for b in lay["buckets"])


# ----------------------------------------------------------------------------- one step
@dataclass(frozen=True)
class Send:
    """What one bucket's step sends: a list of (collective, bytes) run one after another."""

    parts: tuple[tuple[str, float], ...]


def powersgd_sizes(shapes: Sequence[Sequence[int]], rank: int,
                   min_compression_rate: float = 2.0) -> tuple[int, int, int]:
    """Elements of the uncompressed tensors, the Ps and the Qs of one bucket: torch's
    ``_should_compress`` on each gradient viewed as ``shape[0] x rest`` (the same rule as
    ``netsenseml.payload.PowerSGDPayload.sizes``, which payload mode sends)."""
    unc = ps = qs = 0
    for shape in shapes:
        numel = math.prod(int(s) for s in shape)
        n = int(shape[0]) if len(shape) else 1
        m = numel // max(n, 1)
        r = min(n, m, rank)
        if (n + m) * r * min_compression_rate < n * m:
            ps += n * r
            qs += m * r
        else:
            unc += numel
    return unc, ps, qs


def sends(method: str | methods.MethodSpec, bucket: Bucket, ratio: float | None = None
          ) -> Send:
    """A fixed method's collectives for one bucket, from the method registry."""
    spec = methods.as_spec(method)
    info = spec.info
    fp32 = 4.0 * bucket.elements
    if spec.rank is not None:  # low rank (PowerSGD): P and Q of the bucket's matrices
        unc, ps, qs = powersgd_sizes(bucket.shapes, spec.rank)
        return Send((("allreduce", 4.0 * unc), ("allreduce", 4.0 * ps), ("allreduce", 4.0 * qs)))
    if info is None or info.kind != "compressor" or info.wire is None or info.reduction is None:
        raise AdviseError(f"--methods: {method!r} has no wire size in the method registry")
    r = ratio if ratio is not None else (float(spec.arg) if info.arg == "ratio" else 1.0)
    wire = info.wire * r if info.arg == "ratio" else info.wire
    return Send(((info.reduction, fp32 * wire),))


def codec_label(method: str | methods.MethodSpec) -> str:
    """The level label a profile's ``codec_s_per_mb`` names the method's codec by."""
    return methods.as_spec(method).label


def needs_shapes(method: str | methods.MethodSpec) -> bool:
    """A low-rank method (PowerSGD): its sizes need the buckets' shapes (:func:`sends`)."""
    return methods.as_spec(method).rank is not None


def is_reference(method: str | methods.MethodSpec) -> bool:
    """DDP's own fp32 allreduce (no codec): the baseline of the answer's speedups."""
    return methods.as_spec(method).reference


@dataclass(frozen=True)
class Step:
    step_s: float
    compute_s: float  # forward + backward + optimizer + codec: the device's busy time
    codec_s: float
    comm_s: float  # sum of the collectives' times (overlapped or not)
    exposed_s: float  # the part of the step spent waiting for communication
    bytes_sent: float
    collectives: int


def step(work: Workload, net: Network, method: str | methods.MethodSpec,
         ratio: float | None = None) -> Step:
    """One steady-state step of ``method`` (module docstring: the pacer's schedule)."""
    t = work.timing
    spec = methods.as_spec(method)
    label = codec_label(spec)
    total = work.elements
    seen = 0
    codec_before = 0.0
    link_free = 0.0
    comm = nbytes = 0.0
    n_coll = 0
    for b in work.buckets:
        seen += b.elements
        release = t.forward_s + t.backward_s * min(1.0, seen / total) + codec_before
        c = t.codec_s(label, 4 * b.elements)
        codec_before += c
        start = max(release + c, link_free)
        for kind, size in sends(spec, b, ratio).parts:
            d = net.collective_s(kind, size)
            start += d
            comm += d
            nbytes += size
            n_coll += 1
        link_free = start
    backward_end = max(t.forward_s + t.backward_s + codec_before, link_free)
    busy = t.forward_s + t.backward_s + codec_before + t.optimizer_s
    step_s = backward_end + t.optimizer_s
    return Step(step_s, busy, codec_before, comm, step_s - busy, nbytes, n_coll)


# ----------------------------------------------------------------------------- adaptive
def adaptive(work: Workload, net: Network, method: str,
             steps: int = ADAPTIVE_STEPS) -> tuple[float, dict[str, int]]:
    """Mean step (steps 2..``steps``) of an adaptive method's real policy fed by the closed
    form, and the levels it sent (``"topk:0.005": 38``)."""
    dense = 4.0 * work.elements
    lat = net.collective_s("allreduce", 4.0)
    glat = net.collective_s("allgather", 1.0)
    n = max(1, min(int(dense // 4), (1 << 20) // 4))
    sec = net.collective_s("allreduce", 4.0 * n)
    t = work.timing
    codec = {lvl: t.codec_s(lvl, int(dense)) for lvl in ("fp16", "int8", "topk")}
    codec["none"] = 0.0
    loop = StepLoop(methods.resolve(method).build(), NetworkMonitor())
    loop.calibrate(PolicyCalibration(
        dense_bytes=dense, world_size=net.workers, latency_s=lat,
        s_per_byte=max(sec - lat, 0.1 * sec) / (4 * n), codec_s=codec,
        topk_bytes_per_element=8.0, gather_latency_s=glat))
    times: list[float] = []
    levels: dict[str, int] = {}
    for i in range(steps):
        d = loop.next_step()
        m = methods.at_level(d.level, d.ratio)
        s = step(work, net, m)
        probe = loop.rtt_probe_due()
        kind = "allgather" if d.level in ("int8", "topk") else "allreduce"
        equiv = s.bytes_sent * (max(1.0, net.workers / 2) if kind == "allgather" else 1.0)
        if probe:
            loop.monitor.add(4.0, lat)
        loop.monitor.add(equiv, s.comm_s)
        loop.end_step(Measured(comm_s=s.comm_s, exposed_s=s.exposed_s,
                               compute_s=s.step_s - s.exposed_s, codec_s=s.codec_s,
                               bytes_sent=s.bytes_sent + (4.0 if probe else 0.0),
                               collectives=s.collectives + (1 if probe else 0)))
        if i >= 1:
            times.append(s.step_s)
            key = str(m) if d.level == "topk" else d.level
            levels[key] = levels.get(key, 0) + 1
    return sum(times) / len(times), levels


# ----------------------------------------------------------------------------- the answer
@dataclass
class Row:
    method: str
    step_s: float
    exposed_s: float
    throughput: float
    uncertainty_pct: float
    uncertainty_from: str
    levels: dict[str, int] = field(default_factory=dict)
    family: str = ""


def predict(work: Workload, net: Network, method_list: Sequence[str],
            adaptive_steps: int = ADAPTIVE_STEPS) -> list[Row]:
    """One row per method at ``net``'s rate, fastest first."""
    rows = []
    for m in method_list:
        if m in ADAPTIVE:
            s, levels = adaptive(work, net, m, adaptive_steps)
            exposed = math.nan
        else:
            st = step(work, net, m)
            s, levels, exposed = st.step_s, {}, st.exposed_s
        u, src = uncertainty(m, work.model, net.streams > 0)
        rows.append(Row(m, s, exposed, net.workers * work.batch_size / s, u, src, levels,
                        family(m)))
    order = {m: i for i, m in enumerate(method_list)}
    rows.sort(key=lambda r: (-r.throughput, order[r.method]))
    return rows


def best_of(rows: Sequence[Row], method_list: Sequence[str]) -> Row:
    """The fastest row; within ``TIE`` of it, the first in the caller's order."""
    top = max(r.throughput for r in rows)
    tied = {r.method: r for r in rows if r.throughput >= top * (1 - TIE)}
    return next(tied[m] for m in method_list if m in tied)


def step_time(work: Workload, net: Network, method: str,
              adaptive_steps: int = ADAPTIVE_STEPS) -> float:
    """``method``'s step: a fixed one's steady step, an adaptive one's mean over its steps."""
    if method in ADAPTIVE:
        return adaptive(work, net, method, adaptive_steps)[0]
    return step(work, net, method).step_s


def best_at(work: Workload, net: Network, method_list: Sequence[str], rate: float,
            adaptive_steps: int) -> str:
    """The fastest method at ``rate`` (ties: ``TIE``)."""
    n = net.at(rate)
    best, best_s = "", math.inf
    for m in method_list:
        s = step_time(work, n, m, adaptive_steps)
        if s < best_s * (1 - TIE):
            best, best_s = m, s
    return best


@dataclass(frozen=True)
class Crossover:
    rate_mbit: float
    below: str  # best just below the rate
    above: str


def crossovers(work: Workload, net: Network, method_list: Sequence[str],
               lo: float = SEARCH_MBIT[0], hi: float = SEARCH_MBIT[1],
               points: int = SEARCH_POINTS, adaptive_steps: int = ADAPTIVE_STEPS
               ) -> list[Crossover]:
    """The rates where the best method changes: a log grid over [lo, hi], each change
    bisected (in log rate) to ``BISECT_REL``. A change between two grid points narrower
    than the grid's step (two changes inside one step) is missed: the grid is ~14 %
    a step at the defaults."""
    grid = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    bests = [best_at(work, net, method_list, r, adaptive_steps) for r in grid]
    out = []
    for (r0, b0), (r1, b1) in zip(zip(grid, bests, strict=True), list(zip(grid, bests,
                                                                             strict=True))[1:],
                                  strict=False):
        if b0 == b1:
            continue
        a, z = r0, r1
        while z / a > 1 + BISECT_REL:
            mid = math.sqrt(a * z)
            if best_at(work, net, method_list, mid, adaptive_steps) == b0:
                a = mid
            else:
                z = mid
        out.append(Crossover(math.sqrt(a * z), b0, b1))
    return out


# ----------------------------------------------------------------------------- uncertainty
#: What a method puts on the ring, which decides what the closed form gets right or wrong:
#: family -> what it holds (``family``).
FAMILIES = {
    "allreduce": "dense allreduce (allreduce, fp16, bf16, random-k)",
    "allgather": "all-gather (int8, top-k, DGC)",
    "lowrank": "low rank (PowerSGD: chained allreduces)",
    "adaptive": "adaptive (NetSenseML, StellaTrain: their policy's levels)",
}


def family(method: str | methods.MethodSpec) -> str:
    """``method``'s family (:data:`FAMILIES`), from the method registry."""
    spec = methods.as_spec(method)
    if spec.adaptive:
        return "adaptive"
    if spec.rank is not None:
        return "lowrank"
    return "allgather" if spec.collective == "allgather" else "allreduce"


@dataclass(frozen=True)
class Spread:
    """The closed form's |throughput error| over a family's held-out paper-grid runs."""

    family: str
    models: tuple[str, ...]
    methods: tuple[str, ...]
    runs: int
    median_pct: float
    worst_pct: float
    worst_run: str
    mean_signed_pct: float
    workers: tuple[int, ...]
    topologies: tuple[str, ...]
    rates: tuple[float, ...]

    def source(self) -> str:
        """Where the figure comes from, in a line."""
        rates = f"{min(self.rates):g}" + (f"-{max(self.rates):g}" if len(self.rates) > 1 else "")
        return (f"worst |error| vs the emulated paper grid ({PAPER_VALIDATION.name}): "
                f"{self.runs} runs of {', '.join(self.models)}, "
                f"{'/'.join(str(w) for w in self.workers)} workers, "
                f"{'/'.join(self.topologies)}, {rates} Mbit/s; median {self.median_pct:.1f} %")


def spreads(rows: Sequence[dict[str, str]]) -> dict[tuple[str | None, str], Spread]:
    """Per ``(model, family)`` and per ``(None, family)`` (every model), the spread of the
    held-out idle rows of an advise-validation table (its CSV's rows, as text)."""
    groups: dict[tuple[str | None, str], list[dict[str, str]]] = {}
    for r in rows:
        if r["held_out"] != "True" or float(r["streams"]) != 0:
            continue
        groups.setdefault((r["model"], r["family"]), []).append(r)
        groups.setdefault((None, r["family"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        errs = [float(r["error_pct"]) for r in rs]
        worst = max(rs, key=lambda r: abs(float(r["error_pct"])))
        out[key] = Spread(
            key[1], tuple(sorted({r["model"] for r in rs})),
            tuple(sorted({r["method"] for r in rs})), len(rs),
            round(_median([abs(e) for e in errs]), 1), round(abs(float(worst["error_pct"])), 1),
            worst["run"], round(sum(errs) / len(errs), 1),
            tuple(sorted({int(r["workers"]) for r in rs})),
            tuple(sorted({r["topology"] for r in rs})),
            tuple(sorted({float(r["rate_mbit"]) for r in rs})))
    return out


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else (ys[mid - 1] + ys[mid]) / 2


@functools.cache
def paper_spreads(path: Path = PAPER_VALIDATION) -> dict[tuple[str | None, str], Spread]:
    """:func:`spreads` of the committed advise-validation table (empty if absent)."""
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return spreads(list(csv.DictReader(fh)))


def uncertainty(method: str, model: str, congested: bool) -> tuple[float, str]:
    """The stated +- of ``method``'s prediction for ``model`` and where it comes from: its
    family's worst error against the emulated paper grid (the model's runs, else every
    model's), else the SimGrid validation's (:func:`simgrid_uncertainty`), said so."""
    fam = family(method)
    table = {} if congested else paper_spreads()
    spread = table.get((model, fam)) or table.get((None, fam))
    if spread is not None:
        missing = [x for x, have in ((model, spread.models), (method, spread.methods))
                   if x not in have]
        other = f" (no run of {' or '.join(missing)}: the family's)" if missing else ""
        return spread.worst_pct, f"{FAMILIES[fam]}: {spread.source()}{other}"
    why = ("the paper grid's runs are idle" if congested
           else "no paper-grid run of this family")
    u, src = simgrid_uncertainty(uncertainty_table(), method, congested)
    text = (f"{FAMILIES[fam]}: {why}; the SimGrid MLP validation's worst "
            f"(20 Mbit/s, 2-8 workers, {VALIDATION.name}: {src})")
    idle = paper_spreads() if congested else {}
    spread = idle.get((model, fam)) or idle.get((None, fam))
    if spread is not None and spread.worst_pct > u:
        # congestion adds error; it does not take away what the idle grid measured
        return spread.worst_pct, (f"{text}; the idle paper grid's, larger: "
                                  f"{spread.worst_pct:.1f} %")
    return u, text


_NEAREST = {"bf16": "fp16", "randomk": "allreduce"}


def uncertainty_table(path: Path = VALIDATION) -> dict[tuple[str, str], float]:
    """``(method, condition) -> thr_worst_pct`` of the validation summary (empty if absent)."""
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {(r["method"], r["condition"]): float(r["thr_worst_pct"])
                for r in csv.DictReader(fh) if r.get("thr_worst_pct")}


def simgrid_uncertainty(table: dict[tuple[str, str], float], method: str,
                        congested: bool) -> tuple[float, str]:
    """The SimGrid model's worst held-out throughput error for ``method`` and which row gave
    it: its own row, the nearest validated level (top-k / DGC by ratio, bf16 as fp16), else
    the worst of every row (a method never validated)."""
    cond = "congested" if congested else "idle"
    spec = methods.parse(method)
    if spec.topk_ratio is not None:
        key = "topk:0.01" if spec.topk_ratio <= 0.03 else "topk:0.1"
    else:
        key = _NEAREST.get(spec.name, spec.name)
    if (key, cond) in table:
        own = key == method
        return table[(key, cond)], f"{key} {cond}" + ("" if own else f" (nearest to {method})")
    if not table:
        return math.nan, "no validation table"
    return max(table.values()), "worst of all rows (not validated)"


def stream_weight(path: Path = SIMCAL) -> float:
    """The fitted weight of one iperf3 stream against a ring flow (``simcal.json``'s
    ``cross_weight``); 1 (a fair flow) where no fit is at hand."""
    try:
        return float(json.loads(path.read_text())["net"]["cross_weight"])
    except (OSError, KeyError, ValueError, TypeError):
        return 1.0


# ----------------------------------------------------------------------------- checks
def check_methods(text: str) -> list[str]:
    """The ``--methods`` list, each by the method grammar; AdviseError naming the one."""
    out = []
    for raw in text.split(","):
        m = raw.strip()
        if not m:
            continue
        if m in NOT_SIMULATED:
            raise AdviseError(f"--methods: {m!r} cannot be predicted ({NOT_SIMULATED[m]}); "
                              f"allowed: {', '.join(allowed_methods())}")
        try:
            spec = methods.parse(m)
        except ValueError as exc:
            raise AdviseError(f"--methods: {exc}") from None
        if spec.plugin or (spec.kind == "adaptive" and spec.name not in ADAPTIVE):
            raise AdviseError(f"--methods: {m!r} cannot be predicted; allowed: "
                              f"{', '.join(allowed_methods())}")
        if spec.kind == "compressor" and methods.get(spec.name).wire is None:
            raise AdviseError(f"--methods: {m!r} has no wire size in the method registry; "
                              f"allowed: {', '.join(allowed_methods())}")
        out.append(m if spec.arg is None else f"{spec.name}:{spec.arg:g}"
                   if isinstance(spec.arg, float) else f"{spec.name}:{spec.arg}")
    if not out:
        raise AdviseError(f"--methods: empty; allowed: {', '.join(allowed_methods())}")
    return out


def allowed_methods() -> list[str]:
    out = []
    for info in methods.infos():
        if info.kind == "adaptive" and info.name not in ADAPTIVE:
            continue
        if info.kind == "compressor" and info.wire is None:
            continue
        out.append(info.form)
    return out
