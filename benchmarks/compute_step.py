"""Per-model figures for one worker on this CPU: gradient MB, compute-only step time, samples/s.

Why compute-only: it is the floor of a distributed step (no DDP, no hook, no network), so
comparing it with a run's ``step_s`` shows how much the network costs. One process, the
worker's optimizer and loss, ``--threads`` torch threads (default 1, as in the testbed).

    .venv/bin/python benchmarks/compute_step.py [--threads 1] [--steps 10] [--batch-size 32]

Prints one row per configuration: model, knobs, dataset, params, gradient MB (1e6 bytes of
fp32), median and minimum step time over ``--steps`` timed steps after 2 warm-up steps
(the minimum is the better estimate when other processes share the cores), and samples/s
from the median. Includes fetching the batch (synthetic images are generated on demand).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from workloads import registry
from workloads.datasets import load_dataset
from workloads.models import build_model, model_info
from workloads.train import _loss_and_correct, make_optimizer

CONFIGS: list[tuple[str, str, dict]] = [
    ("mlp", "digits", {"width": 480}),
    ("mlp", "digits", {"width": 1024}),
    ("mlp", "digits", {"width": 3500}),
    ("mlp", "mixture", {"width": 2048}),
    ("mlp", "mixture", {"width": 3072}),
    ("resnet18", "synthetic", {"width": 8}),
    ("resnet18", "synthetic", {"width": 32}),
    ("resnet18", "synthetic", {"width": 64}),
    ("gpt", "text", {"layers": 2, "d_model": 64}),
    ("gpt", "text", {"layers": 4, "d_model": 256}),
]


def measure(model_name: str, dataset: str, knobs: dict, batch: int, steps: int) -> dict:
    data = load_dataset(dataset)
    torch.manual_seed(0)
    model = build_model(model_name, input_shape=data.input_shape, num_classes=data.num_classes,
                        **knobs)
    info = model_info(model)
    entry = registry.model_entry(model_name)
    opt = make_optimizer(model, entry, entry.lr, entry.momentum)
    loader = torch.utils.data.DataLoader(data.train, batch_size=batch, shuffle=True,
                                         drop_last=True)
    it = iter(loader)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        x, y = next(it)
        opt.zero_grad(set_to_none=True)
        loss, _, _ = _loss_and_correct(model, x, y, data.kind)
        loss.backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    return {"model": model_name, "knobs": knobs, "dataset": dataset, "params": info.params,
            "grad_mb": info.grad_bytes / 1e6, "step_s": step, "min_s": min(times),
            "samples_s": batch / step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--only", help="run only this model")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, threads={a.threads}, batch={a.batch_size}/worker")
    print(f"{'model':9} {'knobs':44} {'dataset':9} {'params':>10} {'grad MB':>8} "
          f"{'step s':>8} {'min s':>8} {'samples/s':>10}")
    for name, ds, knobs in CONFIGS:
        if a.only and name != a.only:
            continue
        r = measure(name, ds, knobs, a.batch_size, a.steps)
        print(f"{r['model']:9} {str(r['knobs']):44} {r['dataset']:9} {r['params']:>10} "
              f"{r['grad_mb']:>8.2f} {r['step_s']:>8.4f} {r['min_s']:>8.4f} {r['samples_s']:>10.1f}",
              flush=True)


if __name__ == "__main__":
    main()
