"""The paced simulation (``testbed.simulation.paced``): its inputs are a paced run's, and
every policy the run builds runs in it, the prototype's rule included.

Why these: the validation at paper scale (``benchmarks/sim_paper_grid.py``) compares the
simulation with emulated runs; an error there means something only if the simulation was
given what the run was given -- the profile's times, DDP's buckets (one bucket in DDP's
first step), each method's bytes and collectives per step, the run's policy -- so those
are held equal to the committed runs' own records here, run by run, and to each codec's
``wire()``, bucket by bucket. The monitor's samples are held equal to the recorder's
(``netsenseml.comm.CommRecorder``) on the same launches and completions.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from netsenseml import accelerator, methods
from testbed.common import metrics
from testbed.simulation import advise, engine, paced
from testbed.simulation import paced_validation as pv

pytestmark = pytest.mark.skipif(not engine.available(),
                                reason="simgrid not importable (make setup installs it)")

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "results" / "runs" / "paper-grid"
RUNS = pv.run_folders(GRID)
FIXED = ["allreduce", "fp16", "bf16", "int8", "topk:0.01", "topk:0.001", "dgc:0.01",
         "randomk:0.01", "powersgd:4"]
FRAMING_B = 64  # a gathered payload's length words (int64 per wire tensor) and scale


def _rank0(run: Path) -> list[dict[str, str]]:
    return pv.rank0_steps(run)


def test_the_committed_grid_has_runs() -> None:
    assert len(RUNS) >= 40, RUNS


@pytest.mark.parametrize("run", RUNS, ids=lambda p: str(p.relative_to(GRID)))
def test_the_inputs_are_the_runs_own(run: Path) -> None:
    """Profile times, buckets, and per step the bytes and collectives the run handed."""
    cfg = json.loads((run / "config.json").read_text())
    job = paced.from_run(run)
    acc = cfg["accelerator"]
    assert job.timing == accelerator.Timing.from_json(acc["timing"])
    entry = next(e for e in accelerator.load(acc["profile"]).entries
                 if e.model == job.model and e.batch_size == job.batch_size)
    assert (job.timing.forward_s, job.timing.backward_s, job.timing.optimizer_s,
            job.timing.codec_s_per_mb) == (entry.timing.forward_s, entry.timing.backward_s,
                                           entry.timing.optimizer_s, entry.timing.codec_s_per_mb)
    start = json.loads((run / "start.json").read_text())
    assert job.elements == start["params"]
    assert job.buckets == advise.load_workload(job.model).buckets
    assert (job.dilation, job.rate_mbit, job.workers, job.steps) == (
        acc["dilation"], cfg["scenario"]["topology"]["rate_mbit"], cfg["world_size"],
        cfg["scenario"]["workload"]["steps"])
    if job.method in paced.SIMULATED:
        return  # its bytes follow its decisions: test_the_adaptive_runs_levels_are_simulated
    for row in _rank0(run):
        plan = paced.step_plan(job, int(row["step"]), job.method)
        parts = [p for b in plan for p in b.parts]
        assert len(parts) == int(float(row["collectives"])), row["step"]
        assert sum(s for _, s in parts) == pytest.approx(float(row["bytes_sent"]),
                                                         abs=FRAMING_B * len(parts))


@pytest.mark.parametrize("model", ["resnet18-imagenet", "vgg16", "gpt2-small"])
def test_each_methods_bytes_are_its_payload_codecs(model: str) -> None:
    """Per bucket, the collectives and bytes the simulation sends are payload mode's: each
    codec's ``wire()`` (through ``PayloadCodec``), PowerSGD's sizes by torch's rule."""
    import torch

    from netsenseml.payload import PayloadCodec, PowerSGDPayload

    work = advise.load_workload(model)
    job = paced.PacedJob("allreduce", 8, 1000.0, work.timing, work.buckets, work.batch_size)
    for m in FIXED:
        plan = paced.step_plan(replace(job, method=m), 3, m)
        assert len(plan) == len(work.buckets)
        for b, bp in zip(work.buckets, plan, strict=True):
            if m.startswith("powersgd"):
                unc, ps, qs = PowerSGDPayload(None, 4).sizes([torch.Size(s) for s in b.shapes])
                want = [4.0 * n for n in (unc, ps, qs) if n]
                assert [s for _, s in bp.parts] == want
                continue
            codec = PayloadCodec(methods.resolve(m).build())
            wire, _ = codec.layout(b.elements, torch.float32, seed=0)
            real = sum(n * torch.empty(0, dtype=dt).element_size() for n, dt in wire)
            (kind, ours), = bp.parts
            assert kind == codec.reduction, m
            # random-k draws its positions and drops duplicates (~0.5 % at 1 %): the
            # registry's wire is its bound
            rel = 1e-2 if m.startswith("randomk") else 1e-4
            assert ours == pytest.approx(real, rel=rel, abs=16), (m, b.elements)


def test_the_first_step_is_ddps_one_bucket_and_powersgd_is_low_rank_from_it() -> None:
    """DDP's first step is one bucket of the whole gradient; payload mode's PowerSGD sends
    its three allreduces a bucket from that step on (``methods.PAYLOAD_DENSE_STEPS``)."""
    work = advise.load_workload("resnet18-imagenet")
    job = paced.PacedJob("powersgd:4", 8, 1000.0, work.timing, work.buckets, 32)
    first, second, third = (paced.step_plan(job, s, "powersgd:4") for s in (1, 2, 3))
    assert len(first) == 1 and len(first[0].parts) == 3
    assert sum(s for _, s in first[0].parts) < 4.0 * job.elements / 20
    assert first[0].release_s == pytest.approx(work.timing.forward_s + work.timing.backward_s)
    for plan in (second, third):
        assert sum(len(b.parts) for b in plan) == 3 * len(work.buckets)
        assert all(b.codec_s > 0 for b in plan)
    assert paced.warmup_steps("powersgd:4") == 0


def test_period_samples_are_the_recorders() -> None:
    """The monitor's samples from the same launches and completions: payloads in flight
    together one period, a tiny collective its own sample."""
    from netsenseml.comm import CommRecorder

    class Sink:
        def __init__(self) -> None:
            self.got: list[tuple[float, float]] = []

        def add(self, nbytes: float, seconds: float, t: float | None = None,
                rate_ok: bool = True) -> None:
            self.got.append((nbytes, seconds))

    rng = random.Random(7)
    for _ in range(50):
        colls, t = [], 0.0
        for _ in range(rng.randint(1, 5)):
            t += rng.uniform(0.0, 2.0)
            size = rng.choice([4.0, 1000.0, 1e6])
            colls.append(paced.Coll(t, t + rng.uniform(0.1, 3.0), size, size * 4))
        sink = Sink()
        rec = CommRecorder(sink)
        events = sorted([(c.launch, 0, i) for i, c in enumerate(colls)]
                        + [(c.done, 1, i) for i, c in enumerate(colls)],
                        key=lambda e: (e[0], -e[1]))
        tokens = {}
        for at, kind, i in events:
            c = colls[i]
            if kind == 0:
                tokens[i] = rec.launch(int(c.nbytes), at=at, equiv=c.equiv)
            else:
                rec.done(tokens[i], at=at)
        ours = [x for _, b, s in paced.period_samples(colls, 0.0) for x in (b, s)]
        assert ours == pytest.approx([x for pair in sink.got for x in pair]), colls


def test_the_prototypes_rule_is_simulated() -> None:
    """netsenseml-paper's rule judges each simulated collective: from its start at 0.75 the
    kept fraction falls on a slow link, and the bytes follow it one step late (the loop)."""
    run = GRID / "resnet18-star" / "rate_mbit=200" / "allreduce-s0"
    job = replace(paced.from_run(run), method="netsenseml-paper", steps=12)
    res = paced.simulate_isolated([job])[0]
    ratios = [s.ratio for s in res.steps]
    assert ratios[0] == pytest.approx(0.75) and all(s.level == "topk" for s in res.steps)
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < 0.5
    kept = [s.bytes_sent / (8.0 * job.elements) for s in res.steps]
    assert kept == pytest.approx(ratios, rel=1e-3)


def test_the_prototypes_rule_runs_in_the_scale_engine_too() -> None:
    from testbed.simulation.platform import Fabric
    from testbed.simulation.sim import Compute, Job, simulate_isolated

    job = Job(Fabric("star", 4, 20.0), "netsenseml-paper", 340_000.0, 16,
              Compute({"none": 0.01}), htb=False, steps=10)
    res = simulate_isolated([job])[0]
    ratios = [s.ratio for s in res.steps]
    assert ratios[0] == pytest.approx(0.75) and ratios[-1] < ratios[0]


@pytest.mark.parametrize("run", [r for r in RUNS if "netsenseml" in r.name],
                         ids=lambda p: str(p.relative_to(GRID)))
def test_the_adaptive_runs_levels_are_simulated(run: Path) -> None:
    """The run's own policy (NetSenseML, its convergence prior) in the step loop: the first
    decision is the run's (the registration calibration's), and each simulated step hands the
    bytes of the level it chose."""
    job = paced.from_run(run)
    res = paced.simulate_isolated([job])[0]
    first = _rank0(run)[0]
    assert (res.steps[0].level, res.steps[0].ratio) == (
        first["level"], pytest.approx(float(first["ratio"]), rel=0.02))
    for s in res.steps:
        plan = paced.step_plan(job, s.step, paced.level_method(s.level, s.ratio))
        assert s.bytes_sent == pytest.approx(sum(p[1] for b in plan for p in b.parts), abs=8)


@pytest.mark.parametrize("method", ["accordion", "mypkg.codecs:MyCodec"])
def test_what_cannot_be_simulated_is_refused_in_one_line(method: str) -> None:
    with pytest.raises(ValueError) as err:
        paced.check_method(method)
    assert "\n" not in str(err.value) and method.split(":")[0] in str(err.value)


def test_throughput_is_the_runs_definition() -> None:
    run = GRID / "resnet18-star" / "rate_mbit=1000" / "topk-0.01-s0"
    job = paced.from_run(run)
    res = paced.simulate_isolated([job])[0]
    rows = [{"rank": 0, "t": s.t + s.step_s, "samples": job.batch_size * job.workers,
             "kind": "step"} for s in res.steps]
    assert res.throughput(job.batch_size, job.workers) == pytest.approx(metrics.throughput(rows))


def test_the_committed_validation_table_is_reproduced() -> None:
    """results/simulation/paper-grid-validation.csv is what the simulation gives for the
    committed runs now (a part of it: the 1000 Mbit/s points)."""
    path = ROOT / "results" / "simulation" / "paper-grid-validation.csv"
    with path.open(newline="") as fh:
        committed = {r["point"]: r for r in csv.DictReader(fh)}
    points, _ = pv.validate(GRID, workers=2, only="rate_mbit=1000/")
    assert points
    for p in points:
        row = committed[p.point]
        assert float(row["emulated"]) == pytest.approx(p.emulated, rel=1e-4)
        assert float(row["simulated"]) == pytest.approx(p.simulated, rel=1e-3), p.point


def test_a_dumbbell_runs_timeline_of_streams_slows_its_steps(tmp_path: Path) -> None:
    """The topology and the timeline are the run's: a dumbbell's bottleneck, and the
    iperf3 streams of its cross_start/cross_stop events (from the end of the first step),
    each a competing flow through the bottleneck; a timeline the simulation cannot follow
    is refused in one line."""
    src = GRID / "resnet18-star" / "rate_mbit=1000" / "topk-0.01-s0"
    cfg = json.loads((src / "config.json").read_text())
    cfg["scenario"]["topology"] = {"kind": "dumbbell", "n_left": 4, "n_right": 4, "n_cross": 2,
                                   "bottleneck_mbit": 1000, "access_mbit": 100000,
                                   "queue_pkts": 100}
    cfg["scenario"]["workload"].update(steps=None, time_limit_s=4.0)
    cfg["scenario"]["timeline"] = [
        {"at_s": 1.0, "kind": "cross_start", "id": "a", "src": "x0", "dst": "x1", "streams": 4},
        {"at_s": 2.5, "kind": "cross_stop", "id": "a"}]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    job = paced.from_run(tmp_path)
    assert job.bottleneck_mbit == 1000.0 and job.fabric().kind == "dumbbell"
    assert job.cross == (paced.CrossFlow("x0", "x1", 4, 1.0, 2.5),)
    res = paced.simulate_isolated([job])[0]
    first_end = res.steps[0].t + res.steps[0].step_s
    busy = [s.step_s for s in res.steps if 1.2 < s.t - first_end < 2.3]
    idle = [s.step_s for s in res.steps if s.t - first_end > 2.8]
    assert busy and idle and min(busy) > 2.0 * max(idle)
    assert res.steps[-1].t + res.steps[-1].step_s >= 4.0
    cfg["scenario"]["timeline"] = [{"at_s": 1.0, "kind": "set_rate", "link": "s0-s1",
                                    "rate_mbit": 10}]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"\['set_rate'\] are not simulated"):
        paced.from_run(tmp_path)


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    from testbed.cli.app import main

    rc = main(["simulate", "paced", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _row(out: str, method: str) -> list[str]:
    line = next(x for x in out.splitlines() if x.startswith(f"| {method} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_simulate_paced_reads_a_run_folder_or_the_scenario_it_came_from(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``netsense simulate paced``: a run folder as it ran (its throughput beside), and the
    scenario it came from with the same overrides gives the same inputs, so the same
    prediction (the dilation factor pinned to the run's: the rule ``auto`` applies has
    changed since the run was made, and a scenario's is today's)."""
    run = GRID / "resnet18-star" / "rate_mbit=1000" / "topk-0.01-s0"
    ran_k = json.loads((run / "config.json").read_text())["accelerator"]["dilation"]
    ran = json.loads((run / "summary.json").read_text())["throughput_samples_per_s"]
    rc, out, err = _cli(capsys, [str(run), "-j", "1"])
    assert rc == 0, err
    method, k, _real, sim, _step, _levels, emulated, error = _row(out, "topk:0.01")
    assert (float(k), float(emulated)) == (pytest.approx(ran_k), pytest.approx(ran, abs=0.1))
    assert float(error) == pytest.approx(100 * (float(sim) / float(emulated) - 1), abs=0.1)
    rc, out, err = _cli(capsys, ["paper-resnet18-star", "--set", "workload.grads=payload",
                                 "--set", "topology.rate_mbit=1000",
                                 "--set", f"accelerator.dilation={ran_k}", "-m",
                                 "topk:0.01,netsenseml-paper", "-j", "1"])
    assert rc == 0, err
    row = _row(out, "topk:0.01")
    assert float(row[1]) == pytest.approx(ran_k) and float(row[3]) == pytest.approx(float(sim), rel=1e-6)
    assert _row(out, "netsenseml-paper")[5].startswith("topk:0.75 x1")


@pytest.mark.parametrize(("argv", "needle"), [
    (["paper-resnet18-star", "-m", "accordion"], "--methods: method 'accordion': not simulated"),
    ([str(GRID / "resnet18-star" / "rate_mbit=1000" / "fp16-s0"), "--set", "a.b=1"],
     "--set: a run folder is simulated as it ran"),
    (["no-such-scenario"], "no-such-scenario"),
])
def test_simulate_paced_refuses_in_one_line(capsys: pytest.CaptureFixture[str],
                                            argv: list[str], needle: str) -> None:
    rc, _out, err = _cli(capsys, argv)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_powersgds_start_is_read_as_the_run_read_it() -> None:
    """A payload run's PowerSGD has no dense warm-up (``methods.PAYLOAD_DENSE_STEPS``); the
    run marks DDP's start-up (steps 1-2) and leaves it out of its throughput
    (netsenseml.state, testbed.common.metrics); the simulation, compared with the run,
    leaves out the run's marked steps, and by default only its own warm-up (none)."""
    run = GRID / "resnet18-star" / "rate_mbit=1000" / "powersgd-4-s0"
    assert pv.marked_warmup(pv.rank0_steps(run)) == 2
    job = paced.from_run(run)
    res = paced.simulate_isolated([job])[0]
    assert res.warmup == 0 == paced.warmup_steps("powersgd:4")
    steady = res.throughput(32, 8, 2)
    ends = [s.t + s.step_s for s in res.steps]
    rows = [{"rank": 0, "t": e, "samples": 256, "kind": "step", "warmup": int(i < 2)}
            for i, e in enumerate(ends)]
    assert steady is not None and steady == pytest.approx(metrics.throughput(rows))
    point, = pv.validate(GRID, only="resnet18-star/rate_mbit=1000/powersgd-4-s0")[0]
    assert point.simulated == pytest.approx(steady)


def test_a_job_that_ends_within_a_stream_level_ends() -> None:
    """A committed ramp run (accel-ramp: iperf3 at 1 stream from 0.04 to 0.12 s) simulated
    with its time limit inside that level: the flow's stop, due after the job's end, does
    nothing (it aborted SimGrid before: its comms had been cancelled with the job's end)."""
    run = (ROOT / "results" / "runs" / "policy-changes" / "sustained-filter" / "accel-ramp"
           / "netsenseml" / "accel-ramp" / "20261207-133236-netsenseml-s0")
    job = replace(paced.from_run(run), time_limit_s=0.1)
    res = paced.simulate_isolated([job])[0]
    assert res.steps and res.steps[-1].t < 0.1 + 0.01
