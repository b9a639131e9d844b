"""An accelerator profile entry measured on the device at hand (one JSON line).

    python -m workloads.profile --model resnet18 --dataset cifar100-synth --batch-size 64 \
        [--model-args width=64] [--device auto|cpu|cuda] [--steps 20] \
        [--codecs fp16,bf16,int8,topk:0.01,randomk:0.01,dgc:0.01] [--as-profile NAME]

Why: a user with one GPU profiles once and then emulates a cluster of them on any host
(``netsenseml.accelerator``: the pacer holds each part of a real step to these times).
``netsense profile`` runs this module (the testbed never imports torch) and writes the file.

One process, no process group. Measured, as medians over ``--steps`` steps after a warm-up,
by the step loop the host's own check uses (``workloads.host_timing.time_steps``; on CUDA
the device is synchronized around each part): ``forward_s`` (forward and loss),
``backward_s``, ``optimizer_s`` (the model's own optimizer, as the worker trains it).
``codec_s_per_mb``: each codec's compress, residual update and decode of the whole
gradient (``host_timing.codec_seconds``; a gathered level decodes ``--world`` payloads)
per MB of fp32 gradient, keyed by the level name the hook reports. ``buckets``: DDP's
buckets as its reducer builds them after the first step (the gradients' ready order, 1 MiB
first, then ``bucket_cap_mb`` 25 MiB: ``torch.distributed._compute_bucket_assignment_by_size``,
which needs no process group), each given as the share of the backward pass at which its
last gradient was ready; left out where torch.distributed is not available (the pacer then
uses the gradient's element shares).

Printed: one profile entry (the format ``netsenseml.accelerator.parse`` reads), with
``origin: "measured"`` and a ``note`` naming the torch version, the device, the thread
count, the steps and the dataset; with ``--as-profile NAME`` a whole profile file of that
entry (``format``, ``name``, ``device``, ``source``). Bad input: one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from netsenseml import accelerator, methods
from workloads import host_timing, registry
from workloads.datasets import DatasetError

DEFAULT_CODECS = "fp16,bf16,int8,topk:0.01,randomk:0.01,dgc:0.01"
DEFAULT_STEPS = 20
#: DDP's defaults (torch.nn.parallel.DistributedDataParallel): the first bucket and the rest.
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_CAP_BYTES = 25 * 1024 * 1024
DEVICES = ("auto", "cpu", "cuda")


def bad_args(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        bad_args(message)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def choose_device(text: str) -> torch.device:
    available = torch.cuda.is_available()
    if text == "auto":
        text = "cuda" if available else "cpu"
    if text == "cuda" and not available:
        bad_args("--device cuda: no CUDA device is visible to this process; allowed: "
                 f"{', '.join(DEVICES)} (auto picks cpu here)")
    return torch.device("cuda", torch.cuda.current_device()) if text == "cuda" \
        else torch.device("cpu")


class GradReady(host_timing.BackwardObserver):
    """When each parameter's gradient is ready in a backward pass (seconds from its start),
    from hooks after gradient accumulation: CUDA events on a GPU, the clock on a CPU."""

    def __init__(self, params: list[torch.nn.Parameter], device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.passes: list[list[tuple[int, float]]] = []
        self._marks: list[tuple[int, Any]] = []
        self._start: Any = None
        for i, p in enumerate(params):
            p.register_post_accumulate_grad_hook(lambda _p, i=i: self._mark(i))

    def _now(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _mark(self, i: int) -> None:
        self._marks.append((i, self._now()))

    def begin(self) -> None:
        self._marks = []
        self._start = self._now()

    def end(self) -> None:  # the step loop has synchronized the device
        if self.cuda:
            marks = [(i, self._start.elapsed_time(ev) / 1e3) for i, ev in self._marks]
        else:
            marks = [(i, t - self._start) for i, t in self._marks]
        self.passes.append(marks)


def ddp_buckets(params: list[torch.nn.Parameter], order: list[int]) -> list[list[int]]:
    """The parameter indices of each of DDP's buckets, in the order DDP hands them to its
    hook, as its reducer rebuilds them after the first step from the gradients' ready
    ``order`` (the default caps; ``tests/workloads/test_profile.py`` checks this against a
    real DDP)."""
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in order], [FIRST_BUCKET_BYTES, BUCKET_CAP_BYTES],
        [False] * len(order), order)
    return [list(b) for b in buckets]


def bucket_shares(params: list[torch.nn.Parameter], ready: GradReady,
                  backward_s: list[float], warmup: int) -> list[float] | None:
    """The cumulative share of the backward pass at which each of DDP's buckets is ready
    (its last gradient), median over the timed passes; None without torch.distributed."""
    if not dist.is_available() or not ready.passes or not ready.passes[0]:
        return None
    order = [i for i, _ in ready.passes[0]]
    if sorted(order) != list(range(len(params))):
        return None  # a parameter without a gradient (unused): DDP's buckets differ
    buckets = ddp_buckets(params, order)
    per_bucket: list[list[float]] = [[] for _ in buckets]
    for marks, total in zip(ready.passes[warmup:], backward_s, strict=True):
        at = dict(marks)
        for b, members in enumerate(buckets):
            per_bucket[b].append(max(at[i] for i in members) / total)
    shares, last = [], 0.0
    for values in per_bucket:  # ready in this order: shares never decrease
        last = min(max(last, statistics.median(values), 1e-4), 1.0)
        shares.append(round(last, 4))
    return shares


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def measure(a: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The profile entry, and the device's name."""
    device = choose_device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        job = host_timing.build_job(a.model, a.dataset, a.batch_size, a.model_args,
                                   context=a.context, data_dir=a.data_dir, device=device)
    except (registry.RegistryError, DatasetError, TypeError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        bad_args(f"--model/--dataset/--batch-size/--model-args: {first}")
    params = [p for p in job.model.parameters() if p.requires_grad]
    ready = GradReady(params, device)
    times = host_timing.time_steps(job, a.steps, device, observer=ready)
    grad = host_timing.gradient(job.model)
    mb = grad.numel() * 4 / 1e6
    sync = host_timing.syncer(device)
    codecs = {}
    for spec in (methods.parse(c) for c in a.codecs.split(",") if c.strip()):  # enter here
        level, seconds = host_timing.codec_seconds(spec, grad, a.world, sync)
        codecs[level] = _sig(seconds / mb)
    name = device_name(device)
    entry: dict[str, Any] = {
        "model": a.model, "knobs": job.knobs, "batch_size": a.batch_size,
        **{k: _sig(statistics.median(v)) for k, v in times.items()
           if k not in ("between_s", "step_cpu_s")},  # the host's own, not the device's
        "codec_s_per_mb": codecs,
    }
    buckets = bucket_shares(params, ready, times["backward_s"], host_timing.WARMUP_STEPS)
    if buckets is not None:
        entry["buckets"] = buckets
    entry["origin"] = "measured"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    entry["note"] = (
        f"measured {today} on {name} ({device.type}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads; median of {a.steps} steps after "
        f"{host_timing.WARMUP_STEPS} warm-up; dataset {a.dataset}, optimizer {job.optimizer}; "
        f"{len(params)} parameter tensors, {grad.numel()} gradient elements ({mb:.3g} MB); "
        f"codecs decode {a.world} payloads per gathered level"
        + ("" if buckets is None else f"; DDP's buckets: {len(buckets)} (1 MiB first, then 25 MiB)"))
    return entry, name


def as_profile(entry: dict[str, Any], name: str, device: str) -> dict[str, Any]:
    """A whole profile file holding ``entry`` (``--as-profile``)."""
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return {"format": accelerator.FORMAT, "name": name, "device": device,
            "source": f"measured by `netsense profile` on {device} ({today}, "
                      f"torch {torch.__version__})",
            "entries": [entry]}


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="python -m workloads.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--model-args", default="", help="model knobs: name=value,...")
    p.add_argument("--context", type=int, default=64, help="text datasets: tokens per sample")
    p.add_argument("--data-dir", default=None, help="for datasets read from files")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (0: torch's default, all cores)")
    p.add_argument("--codecs", default=DEFAULT_CODECS,
                   help="compressor methods to time, comma-separated ('' for none)")
    p.add_argument("--world", type=int, default=2, help="payloads decoded by gathered levels")
    p.add_argument("--as-profile", metavar="NAME", default=None,
                   help="print a whole profile file named NAME instead of one entry")
    return p


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    for opt, v, low in (("--batch-size", a.batch_size, 1), ("--steps", a.steps, 1),
                        ("--threads", a.threads, 0), ("--world", a.world, 1)):
        if v < low:
            bad_args(f"{opt}: an integer >= {low} expected, got {v}")
    entry, name = measure(a)
    accelerator.parse({"format": accelerator.FORMAT, "device": name, "source": "check",
                       "entries": [entry]}, "measured")  # what we print, the pacer reads
    out = entry if a.as_profile is None else as_profile(entry, a.as_profile, name)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
