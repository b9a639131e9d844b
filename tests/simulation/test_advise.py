"""``netsense advise``: known answers at the rate extremes, one-line refusals, and its
inputs equal to what a paced payload-mode run uses (DDP's layout, PowerSGD's sizes, the
closed form of ``testbed.simulation.model``).

Why these known cases: on a network so fast that every transfer and message is free (a
rate of 1 Ebit/s, 0.01 us a message), a step is compute and codec, so plain allreduce (no
codec) must win -- at the default 50 us a message a ring all-gather's n-1 steps beat an
allreduce's 2(n-1) at 64 workers, and int8 wins instead, as it should; at a rate so low that bytes are everything, the method that puts the fewest bytes on
the ring's bottleneck must win. Neither depends on a fitted number, so they test the model's
structure, not its calibration. The <= 10 s target is measured by
``benchmarks/advise_speed.py`` (a timing, not a behaviour).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.cli.app import main
from testbed.simulation import advise as adv
from testbed.simulation.model import FlowModel, LinkCalibration, StepInput

FIXED = [m for m in adv.DEFAULT_METHODS if m not in adv.ADAPTIVE]
MODELS = ("resnet18-imagenet", "vgg16", "gpt2-small")


def _answer(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    rc = main(["advise", *argv, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("model", MODELS)
def test_a_network_so_fast_that_transfers_are_free_makes_allreduce_win(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    a = _answer(capsys, [model, "--workers", "64", "--rate", "1e9", "--latency-us", "0.01",
                         "--no-crossover"])
    assert a["best"] == "allreduce", a["rows"][:3]


@pytest.mark.parametrize("model", MODELS)
def test_a_network_so_slow_that_bytes_are_everything_makes_the_sparsest_method_win(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    a = _answer(capsys, [model, "--workers", "8", "--rate", "0.5", "--no-crossover",
                         "--methods", ",".join(FIXED)])
    work = adv.load_workload(model)
    net = adv.Network("star", 8, 0.5)

    def volume(m: str) -> float:  # bytes each worker sends over its link per step
        return sum(net.collective_s(kind, size) for b in work.buckets
                   for kind, size in adv.sends(m, b).parts)
    sparsest = min(FIXED, key=volume)
    assert a["best"] == sparsest, (sparsest, a["rows"][:3])


def test_the_answer_names_margin_uncertainty_crossovers_and_assumptions(
        capsys: pytest.CaptureFixture[str]) -> None:
    a = _answer(capsys, ["resnet18-imagenet", "--workers", "8", "--rate", "1000"])
    rows = {r["method"]: r for r in a["rows"]}
    assert set(rows) == set(adv.DEFAULT_METHODS)
    best, runner = rows[a["best"]], rows[a["runner_up"]]
    assert a["margin_pct"] == pytest.approx(100 * (best["throughput"] / runner["throughput"] - 1),
                                            abs=0.2)
    # each family's figure from the paper grid's table (test_advise_validation.py holds
    # the figures to the table)
    for m in ("allreduce", "powersgd:4", "topk:0.001", "netsenseml"):
        assert "vs the emulated paper grid (advise-validation.csv)" in \
            rows[m]["uncertainty_from"], rows[m]
    # each crossover: the best just below differs from the best just above
    work, net = adv.load_workload("resnet18-imagenet"), adv.Network("star", 8, 1000.0)
    assert a["crossovers"]
    for x in a["crossovers"]:
        assert x["below"] != x["above"]
        assert adv.best_at(work, net, adv.DEFAULT_METHODS, x["rate_mbit"] * 0.97, 40) == x["below"]
        assert adv.best_at(work, net, adv.DEFAULT_METHODS, x["rate_mbit"] * 1.03, 40) == x["above"]
    text = " ".join(a["assumed"])
    for needle in ("a100-estimated", "origin: assumed", "DDP's layout", "50 us (assumed)",
                   "advise-validation.csv", "validation-summary.csv", "netsenseml-paper"):
        assert needle in text
    assert "is free on the device: none here" in text  # the entry prices every codec
    mlp = " ".join(_answer(capsys, ["mlp", "--workers", "8", "--rate", "1000"])["assumed"])
    assert "does not name is free on the device: powersgd:4" in mlp  # its entry does not


def test_competing_streams_slow_the_dense_methods_and_read_the_congested_row(
        capsys: pytest.CaptureFixture[str]) -> None:
    idle = _answer(capsys, ["vgg16", "-w", "8", "--rate", "1000", "--no-crossover"])
    busy = _answer(capsys, ["vgg16", "-w", "8", "--rate", "1000", "--streams", "4",
                            "--no-crossover"])
    thr = {r["method"]: r["throughput"] for r in idle["rows"]}
    thr4 = {r["method"]: r for r in busy["rows"]}
    assert thr4["allreduce"]["throughput"] < 0.6 * thr["allreduce"]
    # the paper grid's runs are idle: a congested network falls back to SimGrid's row
    assert "runs are idle" in thr4["allreduce"]["uncertainty_from"]
    assert "allreduce congested" in thr4["allreduce"]["uncertainty_from"]


@pytest.mark.parametrize(("args", "needles"), [
    (["vgg16", "--topology", "ring"], ["--topology", "'ring'", "star, dumbbell, fattree"]),
    (["vgg16", "--workers", "0"], ["--workers", "1..4096"]),
    (["vgg16", "--rate", "-5"], ["--rate", "> 0"]),
    (["vgg16", "--streams", "-1"], ["--streams", "0..1000"]),
    (["vgg16", "--latency-us", "nan"], ["--latency-us", "0..1000000"]),
    (["vgg16", "--methods", "accordion"], ["--methods", "'accordion'", "netsenseml"]),
    (["vgg16", "--methods", "topk:2"], ["--methods", "topk"]),
    (["vgg16", "--methods", "pkg.mod:Thing"], ["--methods", "cannot be predicted"]),
    (["resnet50"], ["--model", "'resnet50'", "gpt2-small, mlp, resnet18-imagenet, vgg16"]),
    (["vgg16", "--batch-size", "64"], ["--batch-size", "32"]),
    (["vgg16", "--profile", "h100"], ["--profile", "a100-estimated"]),
    (["vgg16", "--dataset", "imagenet"], ["--dataset", "cifar100-224-synth"]),
])
def test_bad_input_is_one_line_naming_the_field_and_what_is_allowed(
        capsys: pytest.CaptureFixture[str], args: list[str], needles: list[str]) -> None:
    rc = main(["advise", *args])
    out = capsys.readouterr()
    assert rc == 2, out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert "Traceback" not in out.err + out.out
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_a_collective_is_the_closed_forms() -> None:
    """advise's ring collective is ``model.FlowModel``'s comm (the engine's check)."""
    link = LinkCalibration(alpha_s=50e-6, eta=0.8)
    flow = FlowModel(link)
    for kind in ("allreduce", "allgather"):
        for n, streams in ((2, 0), (64, 0), (1024, 3)):
            net = adv.Network("star", n, 1000.0, streams, alpha_s=50e-6, eta=0.8)
            x = StepInput(n=n, collective=kind, payload_bytes=4e6, rate_mbit=1000.0,
                          compute_s=0.0, competing=streams)
            assert net.collective_s(kind, 4e6) == pytest.approx(flow.comm_s(x))


def test_communication_hides_behind_the_backward_as_the_buckets_release() -> None:
    """A method whose collectives fit in the backward after their bucket's release costs
    its compute, codec and the last bucket's collective only; one bucket of everything
    exposes all of it."""
    work = adv.load_workload("vgg16")
    net = adv.Network("star", 8, 100_000.0)
    s = adv.step(work, net, "allreduce")
    t = work.timing
    assert s.step_s < t.step_s + s.comm_s  # some of it hidden
    last = work.buckets[-1]
    assert s.step_s >= t.step_s + net.collective_s("allreduce", 4 * last.elements) - 1e-12
    one = adv.Workload(work.model, work.dataset, work.batch_size, t,
                       (adv.Bucket(work.elements),), work.profile, "one bucket", work.params)
    s1 = adv.step(one, net, "allreduce")
    assert s1.step_s == pytest.approx(t.step_s + s1.comm_s)


def test_powersgd_sizes_are_payload_modes() -> None:
    """The sizes advise prices PowerSGD at are those payload mode sends (torch's rule)."""
    import torch

    from netsenseml.payload import PowerSGDPayload

    state = PowerSGDPayload(None, 4)
    for b in adv.load_workload("gpt2-small").buckets:
        assert adv.powersgd_sizes(b.shapes, 4) == state.sizes([torch.Size(s) for s in b.shapes])


@pytest.mark.slow
def test_the_shipped_layouts_are_the_bucket_layouts_output() -> None:
    """layouts.json is ``workloads.bucket_layout``'s output (DDP's buckets, torch's meta
    device), for every model it ships; a new torch or model must regenerate it."""
    shipped = json.loads(adv.LAYOUTS.read_text())["layouts"]
    for lay in shipped:
        proc = subprocess.run(
            [sys.executable, "-m", "workloads.bucket_layout", lay["model"], lay["dataset"],
             "--knobs", json.dumps(lay["knobs"]), "--context", str(lay["context"] or 128)],
            capture_output=True, text=True, check=True, timeout=300)
        computed = json.loads(proc.stdout)
        assert computed == {"elements": lay["elements"], "buckets": lay["buckets"]}, lay["model"]


def test_an_unshipped_models_layout_is_computed_in_a_child() -> None:
    """A model the layout file lacks has its layout computed by ``workloads.bucket_layout``: the
    same buckets as the shipped ones when the file is absent."""
    from pathlib import Path

    shipped = adv.load_workload("resnet18-imagenet")
    computed = adv.load_workload("resnet18-imagenet", layouts=Path("/nonexistent.json"))
    assert computed.buckets == shipped.buckets
    assert "computed now" in computed.layout_origin


@pytest.mark.parametrize(("args", "needles"), [
    (["mlp", "--check"], ["--check", "allowed models", "resnet18-imagenet"]),
    (["vgg16", "--check", "-t", "fattree"], ["--check", "--topology star"]),
    (["vgg16", "--check", "-w", "64"], ["--check", "2..8"]),
    (["vgg16", "--check", "--streams", "2"], ["--check", "--streams 0"]),
    (["vgg16", "--check", "--batch-size", "64"], ["--check", "--batch-size 32"]),
])
def test_check_refuses_what_this_machine_cannot_emulate_in_one_line(
        capsys: pytest.CaptureFixture[str], args: list[str], needles: list[str]) -> None:
    """Refused before anything is predicted or emulated (no lock taken, nothing built)."""
    rc = main(["advise", *args])
    out = capsys.readouterr()
    assert rc == 2 and out.out == "", out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_the_heavy_lock_held_by_a_parent_is_not_taken_again(tmp_path) -> None:
    """`flock LOCK netsense advise --check` must not wait for the lock its own parent holds;
    a lock nobody holds, or another process holds, is no parent's."""
    lock = tmp_path / "heavy.lock"
    lock.touch()
    code = ("import sys; from pathlib import Path; from testbed.cli.advise import "
            "_held_by_ancestor as h; print(h(Path(sys.argv[1])))")
    held = subprocess.run(["flock", str(lock), sys.executable, "-c", code, str(lock)],
                          capture_output=True, text=True, check=True)
    free = subprocess.run([sys.executable, "-c", code, str(lock)], capture_output=True,
                          text=True, check=True)
    assert (held.stdout.strip(), free.stdout.strip()) == ("True", "False")


@pytest.mark.emulation
@pytest.mark.slow
def test_check_runs_the_best_and_the_runner_up_emulated_and_prints_both(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """The two leading methods of a 2-worker ResNet-18 star at 1 Gbit/s run emulated in
    payload mode; the answer holds each one's measured throughput beside the prediction
    (a few minutes; under the heavy lock, taken by the command unless a parent holds it)."""
    a = _answer(capsys, ["resnet18-imagenet", "-w", "2", "--rate", "1000", "--no-crossover",
                         "--methods", "topk:0.01,fp16", "--check", "-r", str(tmp_path)])
    got = {c["method"]: c for c in a["check"]}
    assert set(got) == {"topk:0.01", "fp16"}
    for c in got.values():
        assert c["measured"] > 0 and c["error_pct"] == pytest.approx(
            100 * (c["predicted"] / c["measured"] - 1), abs=0.2)


@pytest.mark.parametrize("model", MODELS)
def test_each_methods_bytes_are_its_codecs_wire_sizes(model: str) -> None:
    """advise's bytes per bucket (the registry's wire factor) are what each built-in codec's
    ``wire()`` hands to its collective in a paced run (payload mode sends exactly those),
    up to top-k's rounding of k and int8's one fp32 scale."""
    import torch

    for m in FIXED:
        if m.startswith("powersgd"):
            continue  # test_powersgd_sizes_are_payload_modes
        codec = adv.methods.resolve(m).build()
        for b in adv.load_workload(model).buckets:
            wire, _kept = codec.wire(b.elements, torch.float32, seed=0)
            real = sum(n * torch.empty(0, dtype=dt).element_size() for n, dt in wire)
            (kind, ours), = adv.sends(m, b).parts
            assert kind == codec.reduction, m
            assert ours == pytest.approx(real, rel=1e-4, abs=16), (m, b.elements)
