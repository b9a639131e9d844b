"""What the paper's three models cost on this host: a real step and a recorded-gradient step.

    PYTHONPATH=. python benchmarks/paper_models.py [--models resnet18-imagenet,vgg16,gpt2-small]
        [--batch-size 32] [--context 128] [--steps 2] [--threads 1]

For each model at its real size (issue 41): parameters, the real step's forward, backward
and optimizer seconds (batch 32 at 224 px for the CNNs, 32 x 128 tokens for GPT-2; medians
over ``--steps`` after one warm-up), and the recorded-gradient mode's (``workloads.recorded_gradient``):
the one real step that records the gradient, then the surrogate's forward and backward per
step, against which the real step's forward + backward is the saving. Alone on the host:
run it under ``flock /tmp/netsense-heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from workloads import recorded_gradient
from workloads.datasets import load_dataset
from workloads.models import build_model

DATA = {"resnet18-imagenet": "cifar100-224-synth", "vgg16": "cifar100-224-synth",
        "gpt2-small": "gpt2-synth"}


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    out = model(x)
    if kind == "lm":
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return F.cross_entropy(out, y)


def measure(name: str, batch: int, context: int, steps: int) -> dict[str, float]:
    data = load_dataset(DATA[name], context=context)
    torch.manual_seed(0)
    t = time.perf_counter()
    model = build_model(name, input_shape=data.input_shape, num_classes=data.num_classes)
    build_s = time.perf_counter() - t
    x = torch.stack([data.train[i][0] for i in range(batch)])
    y = torch.stack([torch.as_tensor(data.train[i][1]) for i in range(batch)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    for i in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = _loss(model, x, y, data.kind)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i:
            for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                times[k].append(v)
    out = {k: statistics.median(v) for k, v in times.items()}
    t = time.perf_counter()
    rec = recorded_gradient.record(model, lambda: _loss(model, x, y, data.kind))
    out["record_s"] = time.perf_counter() - t
    recorded_gradient.install(model, rec)
    rf, rb = [], []
    for _ in range(max(steps, 3)):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = model()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        rf.append(t1 - t0)
        rb.append(t2 - t1)
    grads = [p.grad for p in rec.params]
    assert all(torch.equal(g, r) for g, r in zip(grads, rec.grads, strict=True))
    out.update(recorded_forward_s=statistics.median(rf), recorded_backward_s=statistics.median(rb),
               params=sum(p.numel() for p in model.parameters()), build_s=build_s)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(DATA))
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"batch {a.batch_size}, context {a.context}, {a.threads} thread(s), torch "
          f"{torch.__version__}")
    for name in a.models.split(","):
        r = measure(name, a.batch_size, a.context, a.steps)
        print(f"{name:18s} params {r['params']:>11,d}  build {r['build_s']:.2f} s  real step: "
              f"forward {r['forward_s']:.2f} s backward {r['backward_s']:.2f} s optimizer "
              f"{r['optimizer_s']:.3f} s | recorded: record {r['record_s']:.2f} s, then forward "
              f"{r['recorded_forward_s'] * 1e3:.0f} ms backward "
              f"{r['recorded_backward_s'] * 1e3:.0f} ms a step", flush=True)


if __name__ == "__main__":
    main()
