"""What one step of a workload really costs on this host, part by part (one JSON line).

    python -m workloads.pace_probe --model mlp --dataset mixture --batch-size 256 \
        --model-args width=512 --codecs fp16,int8,topk:0.01 [--steps 8] [--threads 1] \
        [--grads recorded]

The testbed's automatic time dilation (``testbed.orchestration.dilation``) starts one copy
per worker at once, so the cores are shared as in the run, and picks the least factor at
which these real times fit the emulated accelerator's slots. Printed (seconds, medians over
the steps after a warm-up): ``forward_s``, ``backward_s``, ``optimizer_s``, ``elements``
(gradient elements) and ``codec_s`` per codec level (compress, residual update and decode
of the whole gradient, as the hook does it), keyed by the compressor's level name.

``--grads recorded`` times what a worker in the gradient-shape mode does instead
(``workloads.recorded``): the surrogate's forward and backward over one recorded real
gradient, and no optimizer step (0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from netsenseml import methods
from workloads import recorded, registry
from workloads.datasets import load_dataset
from workloads.models import build_model


def _timed(fn) -> float:  # noqa: ANN001 - a thunk
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def codec_seconds(spec: str, x: torch.Tensor, world: int) -> tuple[str, float]:
    """The level name and the seconds of a compress, residual update and decode of ``x``."""
    c = methods.resolve(spec).build()
    out = torch.zeros_like(x)

    def once() -> None:
        p = c.compress(x)
        if c.lossy:
            _ = x - c.decompress(p).reshape(-1)
        for _ in range(world if c.reduction == "allgather" else 1):
            out.add_(c.decompress(p).reshape(-1).to(out.dtype))

    once()  # warm-up
    return c.name, min(_timed(once) for _ in range(3))


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    out = model(x)
    if kind == "lm":
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return F.cross_entropy(out, y)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m workloads.pace_probe")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--model-args", default="")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--codecs", default="", help="compressor methods to time, comma-separated")
    p.add_argument("--world", type=int, default=2, help="payloads decoded by gathered levels")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--grads", choices=recorded.MODES, default="real")
    p.add_argument("--barrier", action="store_true",
                   help="after the warm-up print 'ready' and wait for a line on stdin, so "
                        "copies started together time their steps together")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    data = load_dataset(a.dataset, context=a.context)
    model = build_model(a.model, input_shape=data.input_shape, num_classes=data.num_classes,
                        **registry.parse_knobs(a.model_args))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(data.train, batch_size=a.batch_size, shuffle=True,
                                         drop_last=True)
    times: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    batches = iter(loader)
    rec = None
    if a.grads == "recorded":
        x, y = next(batches)
        rec = recorded.record(model, lambda: _loss(model, x, y, data.kind))
        recorded.install(model, rec)
    for i in range(a.steps + 2):
        if i == 2 and a.barrier:  # warm, every copy imported: the timed steps overlap
            print("ready", flush=True)
            sys.stdin.readline()
        if rec is None:
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = model() if rec is not None else _loss(model, x, y, data.kind)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if rec is None:
            opt.step()
        t3 = time.perf_counter()
        if i >= 2:  # warm-up
            times["forward_s"].append(t1 - t0)
            times["backward_s"].append(t2 - t1)
            times["optimizer_s"].append(t3 - t2)
    grad = torch.cat([q.grad.reshape(-1) for q in model.parameters() if q.grad is not None])
    specs = [c for c in a.codecs.split(",") if c]
    result = {k: statistics.median(v) for k, v in times.items()}
    result["elements"] = grad.numel()
    result["codec_s"] = dict(codec_seconds(spec, grad, a.world) for spec in specs)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
