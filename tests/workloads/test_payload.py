"""Payload mode (``workloads.payload``, the worker's ``--grads payload``).

* the bucket layout computed from a meta-device model is DDP's own (its rebuilt buckets,
  read from a real DDP's comm hook), for the paper's three models at their real sizes;
* with two real gloo ranks on loopback, a payload step hands the collectives exactly the
  bytes, collective by collective, that a recorded-gradient step (real DDP, real codecs)
  hands them, for each paper model (reduced sizes) and each method family;
* the worker refuses payload mode without an accelerator profile, and says which mode ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import accelerator, hooks, lifecycle, methods
from testbed.common.ports import free_port
from tests.workloads.paper_models import MODELS, batch, ddp_steps, loss
from tests.workloads.ranks import gloo_group
from workloads import payload
from workloads.models import build_model

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
METHODS = ["allreduce", "fp16", "int8", "topk:0.01", "dgc:0.01", "randomk:0.01",
           "powersgd:4", "netsenseml-paper"]
PAPER = [("resnet18-imagenet", (3, 32, 32), 100), ("vgg16", (3, 32, 32), 100),
         ("gpt2-small", (16,), 50257)]


def _meta_layout(name, shape, classes, knobs) -> payload.Layout:
    with torch.device("meta"):
        model = build_model(name, input_shape=shape, num_classes=classes, **knobs)

    def example(m):
        x = (torch.zeros(2, *shape, dtype=torch.long, device="meta") if len(shape) == 1
             else torch.empty(2, *shape, device="meta"))
        return m(x).float().sum()

    return payload.layout(model, example)


def _ddp_buckets(name, shape, classes, knobs) -> list[list[int]]:
    """The elements of each bucket DDP hands its hook at steps 1 and 2 (world of one)."""
    torch.manual_seed(0)
    ddp = DDP(build_model(name, input_shape=shape, num_classes=classes, **knobs))
    seen: list[int] = []

    def hook(_state, bucket):
        seen.append(bucket.buffer().numel())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, hook)
    out = []
    for step in range(2):
        seen.clear()
        loss(ddp, *batch(shape, classes, 0, step)).backward()
        out.append(list(seen))
    return out


def _layout_worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        cases = [(n, s, c, {}) for n, s, c in PAPER] + list(MODELS)
        for i, (name, shape, classes, knobs) in enumerate(cases):
            lay = _meta_layout(name, shape, classes, knobs)
            first, rebuilt = _ddp_buckets(name, shape, classes, knobs)
            assert first == [lay.elements], (name, first)  # DDP's first step: one bucket
            assert rebuilt == lay.bucket_elements(), (name, rebuilt, lay.bucket_elements())
            assert i >= len(PAPER) or len(rebuilt) > 2  # the real sizes: many buckets
    finally:
        lifecycle.destroy_group()


def test_layout_is_ddps_for_the_paper_models() -> None:
    mp.spawn(_layout_worker, args=(free_port(),), nprocs=1, join=True)


def _recorded_steps(name, shape, classes, knobs, method, rank):
    return [(s["bytes_sent"], s["collectives"], s["level"])
            for s in ddp_steps(name, shape, classes, knobs, method, rank, "recorded", STEPS)]


def _payload_steps(name, shape, classes, knobs, method):
    lay = _meta_layout(name, shape, classes, knobs)
    pacer = accelerator.Pacer(accelerator.Timing.from_step(1e-4), lay.elements)
    state, hook = hooks.build(method, lay.elements, torch.device("cpu"), payload=True,
                              pacer=pacer, seed=0)
    steps = payload.PayloadSteps(lay, state, hook, torch.device("cpu"))
    out = []
    for _ in range(STEPS):
        pacer.start_step()
        pacer.forward_done()
        steps.backward()
        pacer.backward_done()
        s = state.pop_step_stats()
        out.append((s["bytes_sent"], s["collectives"], s["level"]))
    return out


def _bytes_worker(rank: int, world: int, port: int) -> None:
    with gloo_group(rank, world, port):
        for name, shape, classes, knobs in MODELS:
            for method in METHODS:
                rec = _recorded_steps(name, shape, classes, knobs, method, rank)
                pay = _payload_steps(name, shape, classes, knobs, method)
                # PowerSGD's dense start (DDP's start-up steps) is the one difference:
                # payload mode sends its low-rank payload from the first step
                spec = methods.parse(method)
                d = spec.dense_steps - spec.payload_dense_steps
                assert rec[d:] == pay[d:], f"{name} {method}: recorded {rec} != payload {pay}"
                assert all(r[0] > p[0] and p[2] == r[2] for r, p in zip(rec[:d], pay[:d], strict=True))
                assert min(b for b, _, _ in rec) > 0
                dist.barrier()


def test_payload_step_sends_the_bytes_of_a_recorded_step_two_ranks() -> None:
    mp.spawn(_bytes_worker, args=(2, free_port()), nprocs=2, join=True)


def test_a_method_payload_mode_cannot_stand_in_for_is_refused() -> None:
    for method, word in [("torch.distributed.algorithms.ddp_comm_hooks.default_hooks:"
                          "fp16_compress_hook", "comm-hook plug-in")]:
        with pytest.raises(ValueError) as exc:
            hooks.build(method, 10, torch.device("cpu"), payload=True)
        assert word in str(exc.value) and "\n" not in str(exc.value)


def _train(log_dir: Path, extra: list[str], method: str = "topk:0.01") -> tuple[int, str]:
    argv = [sys.executable, "-m", "workloads.train", "--model", "resnet18-imagenet",
            "--dataset", "cifar100-224-synth", "--method", method, "--steps", "3",
            "--batch-size", "32", "--log-dir", str(log_dir), "--grads", "payload", *extra]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return p.returncode, p.stdout + p.stderr


def test_worker_payload_mode_runs_the_real_size_and_says_so(tmp_path: Path) -> None:
    code, out = _train(tmp_path, ["--accelerator", "a100-estimated", "--model-args", "width=64"])
    assert code == 0, out
    recs = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert recs[0]["grads"] == "payload" and recs[0]["params"] == 11_227_812
    steps = [r for r in recs if r["kind"] == "step"]
    assert len(steps) == 3 and all(r["level"] == "topk" and r["bytes_sent"] > 0 for r in steps)
    assert recs[-1]["status"] == "ok"


def test_worker_refuses_payload_mode_without_a_profile(tmp_path: Path) -> None:
    code, out = _train(tmp_path / "none", [])
    assert code == 2 and "--accelerator" in out and "Traceback" not in out
    assert not (tmp_path / "none").exists()


def test_a_method_that_reads_gradient_values_is_refused_in_payload_mode(tmp_path: Path) -> None:
    code, out = _train(tmp_path / "acc", ["--accelerator", "a100-estimated"], "accordion")
    assert code == 2 and "accordion" in out and "Traceback" not in out
    with pytest.raises(ValueError, match="gradient's values"):
        hooks.build("accordion", 10, torch.device("cpu"), payload=True)
