"""The recorded-gradient mode (``workloads.recorded_gradient``, the worker's ``--grads recorded``).

* the surrogate hands autograd exactly the recorded gradient, in the real backward's order;
* with two real gloo ranks on loopback (spawned processes, as
  tests/netsenseml/test_hooks_distributed.py starts them), a recorded step sends the same
  bytes per step as a real step, for each paper model (reduced sizes, same code path) and
  each fixed method of the paper's sweep;
* the worker itself (two ``workloads.train`` ranks, forked from the pre-imported zygote as
  the testbed starts them) in both modes: the same ``bytes_sent`` per step, and the start
  record saying which mode ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from testbed.common.ports import free_port
from tests.workloads.paper_models import MODELS, ddp_steps, loss
from tests.workloads.ranks import gloo_group, outputs, read_log, run_ranks
from workloads import recorded_gradient
from workloads.models import build_model

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
# one per family of the paper sweep's methods (dense, cast, quantized, top-k, sampled top-k,
# low rank, the prototype's adaptive rule)
METHODS = ["allreduce", "fp16", "int8", "topk:0.01", "dgc:0.01", "powersgd:4",
           "netsenseml-paper"]
def _bytes_per_step(name, shape, classes, knobs, method, rank, mode):
    return [s["bytes_sent"] for s in ddp_steps(name, shape, classes, knobs, method, rank,
                                               mode, STEPS)]


def _worker(rank: int, world: int, port: int) -> None:
    with gloo_group(rank, world, port):
        for name, shape, classes, knobs in MODELS:
            for method in METHODS:
                real = _bytes_per_step(name, shape, classes, knobs, method, rank, "real")
                rec = _bytes_per_step(name, shape, classes, knobs, method, rank, "recorded")
                assert real == rec, f"{name} {method}: real {real} != recorded {rec}"
                assert min(real) > 0
                dist.barrier()


def test_recorded_step_sends_the_bytes_of_a_real_step_two_ranks():
    mp.spawn(_worker, args=(2, free_port()), nprocs=2, join=True)


def test_surrogate_gradient_is_the_recorded_one_in_the_real_order():
    torch.manual_seed(0)
    model = build_model("resnet18-imagenet", input_shape=(3, 32, 32), num_classes=10, width=4)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    rec = recorded_gradient.record(model, lambda: loss(model, x, y))
    assert sorted(rec.order) == list(range(len(rec.params)))
    assert rec.order[0] == len(rec.params) - 1  # the head's bias is ready first
    recorded_gradient.install(model, rec)
    order: list[int] = []
    index = {id(p): i for i, p in enumerate(rec.params)}
    for p in rec.params:
        p.register_post_accumulate_grad_hook(lambda q: order.append(index[id(q)]))
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        order.clear()
        model().backward()
        for p, g in zip(rec.params, rec.grads, strict=True):
            assert torch.equal(p.grad, g)
        assert order == rec.order
    assert any(g.abs().sum() > 0 for g in rec.grads)  # real values, not zeros


def _train(tmp: Path, grads: str, zygote) -> list[dict]:
    """Two worker ranks on loopback, forked from the session's zygote as the testbed starts
    them; rank 0's records."""
    tmp.mkdir(parents=True)
    codes = run_ranks(tmp, ["--model", "resnet18-imagenet", "--model-args", "width=4",
                            "--dataset", "cifar100-224-synth", "--method", "topk:0.01",
                            "--steps", "3", "--batch-size", "2", "--grads", grads,
                            "--step-ms", "1"], timeout=240, zygote=zygote)
    assert codes == [0, 0], outputs(tmp)
    return read_log(tmp, 0)


def test_worker_recorded_mode_matches_a_real_run(tmp_path, zygote):
    real = _train(tmp_path / "real", "real", zygote)
    rec = _train(tmp_path / "recorded", "recorded", zygote)
    assert real[0]["grads"] == "real" and rec[0]["grads"] == "recorded"
    assert rec[0]["phases"]["record"] > 0 and isinstance(rec[0]["recorded_loss"], float)
    steps = [[r["bytes_sent"] for r in recs if r["kind"] == "step"] for recs in (real, rec)]
    assert steps[0] == steps[1] and len(steps[0]) == 3
    assert all(r.get("loss") is None for r in rec if r["kind"] == "step")
    assert not any(r["kind"] == "eval" for r in rec)  # no accuracy without training
    assert rec[-1]["kind"] == "summary" and rec[-1]["status"] == "ok"


@pytest.mark.parametrize("flag", [["--eval-every", "2"], ["--target-accuracy", "0.5"],
                                  ["--method", "accordion"]])
def test_worker_refuses_evaluation_with_recorded_gradients(flag):
    from workloads.train import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--grads", "recorded", *flag])
    assert exc.value.code == 2
