"""The host timing: what one step of a workload really costs on this host, part by part
(one JSON line).

    python -m workloads.host_timing --model mlp --dataset mixture --batch-size 256 \
        --model-args width=512 --codecs fp16,int8,topk:0.01 [--steps 8] [--threads 1] \
        [--grads recorded]

Named "host timing", not "probe": a probe is the policy's one-step try of another level
(``netsenseml.policy.Prober``); what the library measures at registration is its
calibration (``netsenseml.calibration``).

The testbed's automatic time dilation (``testbed.orchestration.dilation``) starts one copy
per worker at once, so the cores are shared as in the run, and picks the least factor at
which these real times fit the emulated accelerator's slots. Printed (seconds, medians over
the steps after a warm-up): ``forward_s``, ``backward_s``, ``optimizer_s``, ``elements``
(gradient elements) and ``codec_s`` per codec level (compress, residual update and decode
of the whole gradient, as the hook does it), keyed by the compressor's level name; and the
CPU seconds of a whole step (``step_cpu_s``, between steps included) and of each codec
(``codec_cpu_s``). Wall medians of parts a few milliseconds long miss the cores' sharing
(a part often runs within one time slice while the other copies wait); the CPU seconds do
not, and the run's ranks, in lockstep after each collective, all want the cores at once.

The step loop (:func:`time_steps`) and the codec timing (:func:`codec_seconds`) are also
what ``workloads.profile`` measures a device's profile with: one definition of "a step's
parts" for the host's check and for the device's profile. The optimizer is the model's own
(``workloads.train.make_optimizer``: SGD with momentum, AdamW for the language model), as
the worker trains it.

``--grads recorded`` times what a worker in the recorded-gradient mode does instead
(``workloads.recorded_gradient``): the surrogate's forward and backward over one recorded real
gradient, and no optimizer step (0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from netsenseml import methods
from workloads import recorded_gradient, registry
from workloads.datasets import Data, load_dataset
from workloads.models import build_model
from workloads.train import make_optimizer

WARMUP_STEPS = 2


def _noop() -> None:
    pass


def syncer(device: torch.device) -> Callable[[], None]:
    """What waits for the device's queued work (CUDA), so a clock read after it sees the
    work done; nothing on the CPU."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return _noop


def _timed(fn: Callable[[], None], sync: Callable[[], None] = _noop) -> float:
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def codec_seconds(spec: methods.MethodSpec, x: torch.Tensor, world: int,
                  sync: Callable[[], None] = _noop) -> tuple[str, float]:
    """The level's label (as the hook and a profile's ``codec_s_per_mb`` name it: ``dgc``,
    not its compressor's ``topk-sampled``) and the seconds of a compress, residual update and
    decode of ``x`` (``sync``: waits for the device, :func:`syncer`)."""
    level, wall, _ = codec_times(spec, x, world, sync)
    return level, wall


def codec_times(spec: methods.MethodSpec, x: torch.Tensor, world: int,
                sync: Callable[[], None] = _noop) -> tuple[str, float, float]:
    """:func:`codec_seconds` with the CPU seconds of the same work (least of three each)."""
    c = methods.resolve(spec).build()
    out = torch.zeros_like(x)

    def once() -> None:
        p = c.compress(x)
        if c.lossy:
            _ = x - c.decompress(p).reshape(-1)
        for _ in range(world if c.reduction == "allgather" else 1):
            out.add_(c.decompress(p).reshape(-1).to(out.dtype))

    once()  # warm-up
    walls, cpus = [], []
    for _ in range(3):
        c0 = time.process_time()
        walls.append(_timed(once, sync))
        cpus.append(time.process_time() - c0)
    return spec.level, min(walls), min(cpus)


@dataclass
class Job:
    """One process's training step: the model, its optimizer and its batches."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    loader: torch.utils.data.DataLoader
    data: Data
    knobs: dict[str, Any]  # resolved as the worker resolves them (defaults filled)
    optimizer: str


def build_job(model: str, dataset: str, batch_size: int, model_args: str = "", *,
              context: int = 64, data_dir: str | None = None,
              device: torch.device | None = None) -> Job:
    """The model (on ``device``), its optimizer and a loader of ``batch_size`` batches.
    Raises ``registry.RegistryError``/``DatasetError``/``ValueError`` with one line."""
    torch.manual_seed(0)
    data = load_dataset(dataset, data_dir=data_dir, context=context)
    entry = registry.model_entry(model)
    if not registry.fits(entry, registry.dataset_entry(dataset)):
        raise registry.RegistryError(
            f"dataset {dataset!r} (kind {data.kind}) does not fit model {model!r}; accepted "
            f"kinds: {', '.join(entry.kinds)}")
    given = registry.parse_knobs(model_args)
    knobs = entry.resolve_knobs(given)
    net = build_model(model, input_shape=data.input_shape, num_classes=data.num_classes,
                      **given)
    if device is not None:
        net.to(device)
    opt = make_optimizer(net, entry, entry.lr, entry.momentum)
    loader = torch.utils.data.DataLoader(data.train, batch_size=batch_size, shuffle=True,
                                         drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"batch size {batch_size} exceeds the {len(data.train)} training "
                         f"samples of {dataset}")
    return Job(net, opt, loader, data, knobs, entry.optimizer)


class BackwardObserver:
    """Told when each timed backward pass begins and ends (:func:`time_steps`)."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    out = model(x)
    if kind == "lm":
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return F.cross_entropy(out, y)


def time_steps(job: Job, steps: int, device: torch.device | None = None, *,
               warmup: int = WARMUP_STEPS, at_warm: Callable[[], None] | None = None,
               observer: BackwardObserver | None = None, grads: str = "real"
               ) -> dict[str, list[float]]:
    """Seconds of the forward pass (with the loss), the backward pass and the optimizer
    step, per step after ``warmup`` steps; on CUDA the device is waited for around each
    part. ``at_warm`` runs once, after the warm-up (a barrier between copies); ``observer``
    sees every backward pass, warm-up included. ``grads="recorded"``: the recorded-gradient
    mode's surrogate step over one recorded gradient, no optimizer step. ``between_s``:
    what the worker does between two steps (the next batch, the loss read back, the
    gradient's health norm), which is no part of a device's profile but is of the host's
    real work per step."""
    device = device or torch.device("cpu")
    sync = syncer(device)
    times: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": [],
                                     "between_s": [], "step_cpu_s": []}
    batches = iter(job.loader)
    rec = None
    if grads == "recorded":
        x, y = next(batches)
        x, y = x.to(device), y.to(device)
        rec = recorded_gradient.record(job.model, lambda: _loss(job.model, x, y, job.data.kind))
        recorded_gradient.install(job.model, rec)
    for i in range(steps + warmup):
        if i == warmup and at_warm is not None:
            at_warm()
        tb, cb = time.perf_counter(), time.process_time()
        if rec is None:
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(job.loader)
                x, y = next(batches)
            x, y = x.to(device), y.to(device)
        job.opt.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        loss = job.model() if rec is not None else _loss(job.model, x, y, job.data.kind)
        sync()
        t1 = time.perf_counter()
        if observer is not None:
            observer.begin()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        if observer is not None:
            observer.end()
        if rec is None:
            job.opt.step()
        sync()
        t3 = time.perf_counter()
        _health(job.model, loss)
        t4 = time.perf_counter()
        if i >= warmup:
            times["forward_s"].append(t1 - t0)
            times["backward_s"].append(t2 - t1)
            times["optimizer_s"].append(t3 - t2)
            times["between_s"].append((t0 - tb) + (t4 - t3))
            times["step_cpu_s"].append(time.process_time() - cb)
    return times


def _health(model: torch.nn.Module, loss: torch.Tensor) -> None:
    """What the worker does between two steps besides them: the loss read back and the
    gradient's norm (its health check)."""
    loss.item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads:
        float(torch.stack(torch._foreach_norm(grads)).sum())


def gradient(model: torch.nn.Module) -> torch.Tensor:
    """The model's gradient as one flat fp32 tensor (what the codecs are timed on)."""
    return torch.cat([q.grad.reshape(-1).float() for q in model.parameters()
                      if q.grad is not None])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m workloads.host_timing")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--model-args", default="")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--codecs", default="", help="compressor methods to time, comma-separated")
    p.add_argument("--world", type=int, default=2, help="payloads decoded by gathered levels")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--grads", choices=recorded_gradient.MODES, default="real")
    p.add_argument("--barrier", action="store_true",
                   help="after the warm-up print 'ready' and wait for a line on stdin, so "
                        "copies started together time their steps together")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    job = build_job(a.model, a.dataset, a.batch_size, a.model_args, context=a.context)

    def barrier() -> None:  # warm, every copy imported: the timed steps overlap
        print("ready", flush=True)
        sys.stdin.readline()

    times = time_steps(job, a.steps, at_warm=barrier if a.barrier else None, grads=a.grads)
    grad = gradient(job.model)
    specs = [methods.parse(c) for c in a.codecs.split(",") if c]  # the codecs enter here
    result: dict[str, Any] = {k: statistics.median(v) for k, v in times.items()}
    result["elements"] = grad.numel()
    timed = [codec_times(spec, grad, a.world) for spec in specs]
    result["codec_s"] = {level: wall for level, wall, _ in timed}
    result["codec_cpu_s"] = {level: cpu for level, _, cpu in timed}
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
