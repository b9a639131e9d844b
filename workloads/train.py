"""The training worker: one process per emulated host, or one per GPU under torchrun.

    python -m workloads.train --model M --dataset D --method METHOD (--steps N | --time-limit S)
        --batch-size B --seed S --log-dir DIR [--eval-every K] [--target-accuracy A]
        [--data-dir DIR] [--lr LR] [--width W] [--layers L] [--d-model D] [--context C]
        [--model-args K=V,...] [--threads N] [--pg-timeout S] [--eval-samples N]
        [--no-error-feedback] [--accelerator PROFILE | --step-ms MS] [--dilation K]
        [--grads real|recorded]

Models and datasets come from ``workloads.registry`` (names, accepted pairings, default
optimizer and lr, default evaluation size); ``--model package.module:factory`` trains a
user's model given by import path (see that module and workloads/README.md). Size knobs:
``--width``/``--layers``/``--d-model`` are shorthands, ``--model-args`` sets any knob.

Rendezvous is torch.distributed's ``env://``: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
(LOCAL_RANK picks the GPU, default 0). Without WORLD_SIZE the worker runs alone on loopback.
``--device``/``--backend`` (default auto: CUDA and NCCL when a GPU is visible, else CPU and
gloo; gloo on CUDA tensors works too). The interface variables (GLOO_SOCKET_IFNAME, NCCL_*)
are left to the caller (the testbed sets them to the emulated host's interface). Every method goes through ``netsenseml.hooks``,
plain ``allreduce`` included, so bytes and comm time are measured the same way for all.

Why the choices below:

- **Step count agreement.** With ``--steps N`` every rank runs exactly N steps. With
  ``--time-limit S`` the ranks exchange their elapsed time in a one-element MAX all_reduce
  and stop when it reaches S, so all ranks stop after the same step. Not after every step:
  on a congested link even a 4-byte collective waits behind the queue (and behind TCP's
  retransmission timeout when the queue drops it), which would slow every method and
  pollute the hook's compute estimate. The next check comes after a quarter of the
  estimated remaining steps (at least 1, at most ``STOP_CHECK_MAX_STEPS``), computed from
  the exchanged values, so every rank picks the same next step; the run overshoots S by
  about a step. The exchange is outside ``step_s``. When both are given, whichever comes
  first ends the run.
- **compute_s.** DDP overlaps gradient communication with the backward pass, so compute and
  communication cannot be separated by timestamps in one step. We define
  ``compute_s = max(step_s - comm_s, 0)`` where ``step_s`` is the wall time of the whole step
  (data, forward, backward incl. waiting for the hook's collectives, optimizer) and ``comm_s``
  is the hook's own measure of time spent in collectives. It therefore attributes overlapped
  time to communication (an upper bound on communication, lower bound on compute).
  benchmarks/compute_step.py measures the compute-only step time without DDP.
- **Failure.** The process group is created with ``timeout=--pg-timeout`` seconds (default
  60): a collective whose peer has died raises within that time (gloo usually raises at once
  on a closed connection). The worker then writes a summary with ``status: "failed"`` and
  exits 1. A watchdog thread is the last resort: if no step or eval batch completes for
  ``2 * pg_timeout + 10`` s, it writes the same failure summary and exits 1, so a worker never
  hangs. Long steps on slow links need a ``--pg-timeout`` above the longest expected step.
  With ``--time-limit`` the watchdog also ends a worker that is still inside a step
  ``max(LIMIT_GRACE_S, 3 x the longest step so far)`` after the limit (a link that died or
  became far slower than before): the run ends seconds after its time limit, not a
  collective timeout later. When the step is inside a plug-in's code at that moment (a
  compressor's ``compress``, a comm hook: ``NetSenseState.user_code_stuck``) the reason
  names that code as user code that did not return, not the network.
- **Health.** After each backward the reduced gradient's norm is checked (one reduction
  over the gradients): a NaN/inf loss or gradient ends the worker with ``diverged at step
  N`` (every rank sees the same reduced gradient, so all stop at the same step), and a
  gradient that is exactly zero for the first ``ZERO_GRAD_STEPS`` steps with ``not
  learning`` (nothing can move the model: a codec whose payload aliases its input, a hook
  that returns zeros). A failed record write (disk full) still ends the worker with its
  reason on stderr.
- **Exit.** A finished worker (summary written, ``ok`` or ``failed``) leaves with
  ``os._exit`` after ``destroy_process_group``, skipping interpreter finalization. Why: gloo's
  worker threads (``ProcessGroupGloo::runLoop``) drop their reference to a finished work item
  *after* the main thread's ``wait()`` has returned; when that is the last reference to a
  tensor owned by Python, the thread takes the GIL to free it. If the main thread has begun
  finalizing by then, CPython ends that thread with ``pthread_exit``, whose forced unwind
  crosses a ``noexcept`` C++ frame: ``terminate called without an active exception``,
  SIGABRT, after a complete ``ok`` summary (a race, so it shows in some runs and not in
  others). Nothing is left to finalize:
  the record file is closed and stdout/stderr are flushed first.
- **Target accuracy.** Reaching ``--target-accuracy`` marks that eval record
  ``reached_target: true``; training continues to the step/time limit (the orchestrator
  computes time-to-accuracy from the eval records), or ends there with
  ``--stop-at-target`` (convergence benchmarks: steps to target is all they need).
- **Bytes not in ``bytes_sent``.** ``bytes_sent`` is the hook's count of gradient traffic.
  Outside the hook go: DDP's per-step broadcast of buffers from rank 0 (BatchNorm running
  statistics of ``resnet18``, ~20 KB at width 32; kept on so that ranks evaluate the same
  model), the 4-byte stop flag of ``--time-limit``, and the evaluation count all_reduce.
- **Evaluation** runs on all ranks at the same steps: each evaluates a disjoint shard of the
  first ``--eval-samples`` held-out samples (default: the dataset's, from the registry) and
  the counts are summed with one all_reduce, so the accuracy is global. A final evaluation
  always runs at the end. Batches of at least ``EVAL_BATCH`` samples (larger matrix products
  cost less per sample). Evaluation time is inside the worker's clock; each eval record
  carries its own ``eval_s`` so an analysis can count training time without it.
- **Emulated accelerator.** ``--accelerator PROFILE`` (or ``--step-ms``) holds each part of
  a step to the profile's time (``netsenseml.accelerator``): the forward, each bucket's
  release (in the hook), the codec, the optimizer; ``--dilation k`` makes the worker's
  clock real time / k (``netsenseml.clock``), so every time it records, ``--time-limit``
  included, is virtual, while ``--pg-timeout`` and the watchdog act on the real clock at k
  times their value. A part whose real work did not fit is counted (``pace_overrun``).
- **Recorded gradients** (``--grads recorded``, throughput runs): one real local gradient
  is computed in set-up (phase ``record``) and every step hands DDP that gradient through
  the normal hook path, without the host's forward/backward, data or optimizer step; the
  emulated accelerator's pacer still holds each part to its profile (``workloads.recorded_gradient``
  says why and how). The model does not train, so evaluation options are refused and no
  accuracy is reported; the start record's ``grads`` says which mode ran, and each step's
  ``loss`` is empty.
- **DGC and momentum.** ``dgc:R`` keeps its momentum in the hook (momentum correction,
  ``netsenseml.memory``), so with error feedback on the worker's SGD runs without momentum;
  SGD momentum on top would apply momentum twice.

Records: ``DIR/rank<N>.jsonl``, one JSON object per line (start, step, eval, summary); the
format is the dataclasses of ``workloads.records``, which the testbed parses back.

Exit codes: 0 ok, 2 bad arguments (one line on stderr naming the argument and accepted
values), 1 runtime failure including a dead peer or a timed-out collective.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

# Taken before the heavy imports, so the start record can say how long they took.
PROC_WALL = time.time()
PROC_T0 = time.perf_counter()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, Subset  # noqa: E402

from netsenseml import accelerator, clock, convergence, hooks, lifecycle, methods  # noqa: E402
from netsenseml.dilation import Dilation  # noqa: E402
from workloads import payload as payload_mode  # noqa: E402
from workloads import recorded_gradient, registry  # noqa: E402
from workloads.datasets import Data, DatasetError, load_dataset  # noqa: E402
from workloads.models import build_model, model_info  # noqa: E402
from workloads.records import EvalRecord, Record, StartRecord, StepRecord, SummaryRecord  # noqa: E402

EVAL_BATCH = 256  # minimum evaluation batch
DEFAULT_BATCH = 32  # per rank, when --batch-size is not given
DEFAULT_STEPS = 200  # when neither --steps nor --time-limit is given


# --------------------------------------------------------------------------- arguments


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        bad_args(message)


def bad_args(message: str) -> NoReturn:
    print(f"error: {message} (see `python -m workloads.train --help`)", file=sys.stderr,
          flush=True)
    sys.exit(2)


def say(line: str) -> None:
    """One line to stdout in one write(2): ranks sharing a terminal or pipe (torchrun) never
    splice their lines together."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def _positive(kind: type) -> Any:
    def conv(text: str) -> Any:
        v = kind(text)
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return v

    conv.__name__ = f"positive {kind.__name__}"
    return conv


def build_parser() -> argparse.ArgumentParser:
    """The worker's arguments, in four groups (the order ``--help`` lists them in)."""
    p = _OneLineParser(prog="python -m workloads.train", description=__doc__.split("\n")[0])
    _job_arguments(p)
    _model_arguments(p)
    _process_arguments(p)
    _device_arguments(p)
    return p


def _job_arguments(p: argparse.ArgumentParser) -> None:
    """What to train, how long, how it is evaluated, where its records go."""
    p.add_argument("--model", default="mlp",
                   help=f"one of: {registry.accepted_models()} (default mlp)")
    p.add_argument("--dataset", default="digits", choices=registry.dataset_names(),
                   help="default digits")
    p.add_argument("--method", default="allreduce",
                   help=f"one of: {methods.forms()} (default allreduce)")
    p.add_argument("--steps", type=_positive(int),
                   help=f"train exactly N steps (default {DEFAULT_STEPS} when no --time-limit)")
    p.add_argument("--time-limit", type=_positive(float), help="train S seconds (ranks agree)")
    p.add_argument("--batch-size", type=_positive(int), default=DEFAULT_BATCH,
                   help=f"per rank (default {DEFAULT_BATCH})")
    p.add_argument("--seed", type=int, default=0, help="default 0")
    p.add_argument("--log-dir",
                   help="folder for rank<N>.jsonl (default runs/<model>-<dataset>-<method>-s<seed>)")
    p.add_argument("--eval-every", type=_positive(int), help="eval every K steps")
    p.add_argument("--eval-samples", type=_positive(int),
                   help="held-out samples per evaluation (first N of the split; default: the "
                        "dataset's, e.g. 2000 for mixture, 1000 for the others)")
    p.add_argument("--target-accuracy", type=float, help="mark evals reaching it")
    p.add_argument("--stop-at-target", action="store_true",
                   help="end the run at the first evaluation reaching --target-accuracy")
    p.add_argument("--data-dir", help="folder holding CIFAR python-pickle batches")


def _model_arguments(p: argparse.ArgumentParser) -> None:
    """The optimizer's rate and the model's size knobs."""
    p.add_argument("--lr", type=_positive(float),
                   help="default: the model's (" + ", ".join(
                       f"{n} {registry.model_entry(n).lr:g} {registry.model_entry(n).optimizer}"
                       for n in registry.model_names()) + "; plug-ins 0.05 sgd)")
    p.add_argument("--width", type=_positive(int),
                   help="knob width: mlp hidden units (default 1024) or resnet18 first-stage "
                        "channels (default 32, 64 = original)")
    p.add_argument("--layers", type=_positive(int), help="knob layers: gpt blocks (default 4)")
    p.add_argument("--d-model", type=_positive(int), help="knob d_model: gpt width (default 256)")
    p.add_argument("--model-args", default="",
                   help="any model knobs as name=value,...; e.g. width=512 or, for a plug-in "
                        "factory, its own keyword arguments")
    p.add_argument("--context", type=_positive(int), default=64,
                   help="text dataset: characters per sample, the gpt context (default 64)")


def _process_arguments(p: argparse.ArgumentParser) -> None:
    """The process: threads, the process group, the method's options."""
    p.add_argument("--threads", type=_positive(int), default=1, help="torch threads (default 1)")
    p.add_argument("--pg-timeout", type=_positive(float), default=60.0,
                   help="process-group timeout in seconds (default 60)")
    p.add_argument("--no-error-feedback", action="store_true",
                   help="disable the error-feedback residual of lossy methods")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="torch.distributed backend (auto: nccl on CUDA, else gloo)")
    p.add_argument("--convergence", metavar="PATH",
                   help="netsenseml: the convergence table of this job (netsense convergence); "
                        "default: netsenseml.convergence's stated conservative prior")


def _device_arguments(p: argparse.ArgumentParser) -> None:
    """The emulated accelerator, time dilation, the gradient mode and the device."""
    p.add_argument("--accelerator", metavar="PROFILE",
                   help="pace each step to an emulated accelerator's profile: a shipped name ("
                        + ", ".join(accelerator.names()) + ") or a JSON path "
                        "(netsenseml.accelerator); the gradients stay real")
    p.add_argument("--step-ms", type=_positive(float),
                   help="pace each step to this emulated accelerator step time (ms)")
    p.add_argument("--dilation", type=float, default=1.0,
                   help="time-dilation factor k >= 1: the worker's clock is real time / k "
                        "(the testbed divides link rates by k; netsenseml.clock)")
    p.add_argument("--grads", choices=(*recorded_gradient.MODES, "payload"), default="real",
                   help="real: compute every step's gradient (default); recorded: compute one "
                        "real gradient in set-up and hand DDP that gradient every step, no "
                        "backward on the host (throughput runs; workloads.recorded_gradient)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where the model trains (auto: cuda when available); the GPU is "
                        "LOCAL_RANK's (default 0)")


BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")


class DeviceChoice(NamedTuple):
    device: str  # "cpu" | "cuda"
    index: int | None  # the CUDA device index, None on CPU
    backend: str  # "gloo" | "nccl"


def choose_device(device: str, backend: str, cuda_available: bool, device_count: int,
                  local_rank: int) -> DeviceChoice:
    """Device type, CUDA index and backend for the ``--device``/``--backend`` pair.

    The GPU is ``LOCAL_RANK``'s: the launcher (torchrun, or the testbed, which gives each
    emulated host one GPU through CUDA_VISIBLE_DEVICES) decides which process owns which
    GPU. Never ``rank % device_count``: two ranks of a node would share a GPU, which NCCL
    refuses. Raises ValueError with a one-line reason for an impossible pair.
    """
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    if device == "cuda":
        if not cuda_available or device_count == 0:
            raise ValueError("--device cuda: no CUDA device is visible to this process")
        if not 0 <= local_rank < device_count:
            raise ValueError(f"LOCAL_RANK {local_rank} has no GPU: {device_count} visible "
                             f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda (NCCL moves GPU tensors only); "
                         "use --backend gloo on CPU")
    return DeviceChoice(device, local_rank if device == "cuda" else None, backend)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.steps is None and args.time_limit is None:
        args.steps = DEFAULT_STEPS
    if args.log_dir is None:  # the same on every rank: it depends on the arguments only
        tag = re.sub(r"[^A-Za-z0-9_.=-]+", "-", f"{args.model}-{args.dataset}-{args.method}")
        args.log_dir = str(Path("runs") / f"{tag.strip('-')}-s{args.seed}")
    try:
        # where the method enters the worker: parsed once, carried as args.spec; a plug-in
        # (pkg.mod:Name) is imported now: one line if it fails
        args.spec = methods.load(args.method).spec
    except ValueError as e:
        bad_args(f"argument --method: {e}")
    try:
        registry.check_model_name(args.model)
    except registry.RegistryError as e:
        bad_args(f"argument --model: {e}")
    try:
        args.knobs = model_knobs(args)
        if not registry.is_plugin(args.model):
            registry.model_entry(args.model).resolve_knobs(args.knobs)
    except registry.RegistryError as e:
        bad_args(f"argument --model-args: {e}")
    if not registry.is_plugin(args.model):
        entry = registry.model_entry(args.model)
        if not registry.fits(entry, registry.dataset_entry(args.dataset)):
            bad_args(f"argument --dataset: {args.dataset!r} does not fit model {args.model!r}; "
                     f"accepted for {args.model}: {', '.join(registry.datasets_for(entry))}")
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        bad_args(f"argument --target-accuracy: must be in (0, 1], got {args.target_accuracy}")
    _check_grads(args)
    if args.stop_at_target and (args.target_accuracy is None or not args.eval_every):
        bad_args("argument --stop-at-target: needs --target-accuracy and --eval-every")
    if args.eval_samples is None:
        args.eval_samples = registry.dataset_entry(args.dataset).eval_samples
    try:  # the factor as the value the clock takes (netsenseml.dilation)
        args.dilation = Dilation(args.dilation)
    except ValueError:
        bad_args(f"argument --dilation: a number >= 1 expected, got {args.dilation:g}")
    if args.accelerator is not None and args.step_ms is not None:
        bad_args("argument --step-ms: give --accelerator or --step-ms, not both")
    try:
        args.timing = pace_timing(args)
    except accelerator.ProfileError as e:
        bad_args(f"argument --accelerator: {e}")
    if args.convergence is not None:
        if not args.spec.reads_prior:
            bad_args("argument --convergence: only the netsenseml method reads a convergence table")
        try:
            convergence.load(args.convergence)
        except convergence.ConvergenceError as e:
            bad_args(f"argument --convergence: {e}")
    return args


def _check_grads(args: argparse.Namespace) -> None:
    """What the recorded and payload modes cannot measure or run, refused in one line."""
    if args.grads != "real":
        given = [flag for flag, v in (("--eval-every", args.eval_every),
                                      ("--target-accuracy", args.target_accuracy),
                                      ("--stop-at-target", args.stop_at_target)) if v]
        if given:
            bad_args(f"argument --grads: {args.grads} gradients do not train the model, so "
                     f"{', '.join(given)} cannot be measured; drop them")
        if args.spec.needs_values:  # Accordion: gradient norms
            bad_args(f"argument --grads: method {args.method} decides from gradient values, "
                     f"which {args.grads} mode does not give it; use --grads real")
    if args.grads == "payload" and args.step_ms is None and args.accelerator is None:
        bad_args("argument --grads: payload mode computes nothing on the host, so the step's "
                 "compute and codec times must come from --accelerator PROFILE or --step-ms MS")


def pace_timing(args: argparse.Namespace) -> accelerator.Timing | None:
    """The emulated accelerator's timing of this job's step, or None for a native run."""
    if args.step_ms is not None:
        return accelerator.Timing.from_step(args.step_ms / 1e3)
    if args.accelerator is None:
        return None
    knobs = dict(args.knobs)
    if not registry.is_plugin(args.model):
        knobs = registry.model_entry(args.model).resolve_knobs(args.knobs)
    return accelerator.load(args.accelerator).timing(args.model, knobs, args.batch_size)


def model_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """Knobs given on the command line: the shorthand flags, then ``--model-args``."""
    given: dict[str, Any] = {k: v for k, v in (("width", args.width), ("layers", args.layers),
                                                ("d_model", args.d_model)) if v is not None}
    return {**given, **registry.parse_knobs(args.model_args)}


# --------------------------------------------------------------------------- logging


def _clean(v: Any) -> Any:
    """JSON has no NaN/inf; tensors and numpy scalars become plain numbers."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class RecordLog:
    """Appends records (``workloads.records``) to one file, flushing each, from any thread;
    stamps each with ``t`` (since ``origin``) and ``wall`` when it is written."""

    def __init__(self, path: Path, origin: float) -> None:
        self.fh: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 (lives for the run)
        self.origin = origin
        self.lock = threading.Lock()

    def write(self, record: Record) -> None:
        record.t, record.wall = clock.now() - self.origin, time.time()
        line = json.dumps({k: _clean(v) for k, v in record.to_json().items()})
        with self.lock:
            if not self.fh.closed:
                self.fh.write(line + "\n")
                self.fh.flush()

    def close(self) -> None:
        with self.lock:
            self.fh.close()


#: Least time a worker may stay inside a step past its time limit (module doc, Failure).
LIMIT_GRACE_S = 8.0
#: Steps with an exactly zero reduced gradient after which a run cannot be learning.
ZERO_GRAD_STEPS = 3


class TrainingFault(RuntimeError):
    """The training itself broke (diverged, cannot learn); ``str()`` is the reason."""


class Watchdog(threading.Thread):
    """Last-resort exit if training stops making progress (see module docstring)."""

    def __init__(self, limit_s: float, on_stall: Any, time_limit_s: float | None = None,
                 user_code: Any = None) -> None:
        """``user_code``: a callable naming the user code (a compressor or hook plug-in)
        the step is inside, or None (``NetSenseState.user_code_stuck``): a stall there is
        that code not returning, not the network."""
        super().__init__(daemon=True, name="watchdog")
        self.limit_s, self.on_stall = limit_s, on_stall
        self.user_code = user_code or (lambda: None)
        self.last = time.monotonic()
        self._stopped = threading.Event()
        self.limit_at = None if time_limit_s is None else time.monotonic() + time_limit_s
        self.longest_step = 0.0
        self.step = 0

    def beat(self) -> None:
        self.last = time.monotonic()

    def stepped(self, step: int, step_s: float) -> None:
        self.step, self.longest_step = step, max(self.longest_step, step_s)
        self.beat()

    def extend(self, seconds: float) -> None:
        """Evaluations do not count against the time limit's grace."""
        if self.limit_at is not None:
            self.limit_at += seconds

    def overdue(self) -> str | None:
        if self.limit_at is None:
            return None
        grace = max(LIMIT_GRACE_S, 3 * self.longest_step)
        late = time.monotonic() - self.limit_at
        if late <= grace:
            return None
        inside = self.user_code()
        if inside:
            return (f"time limit passed {late:.0f} s ago while step {self.step + 1} was inside "
                    f"user code that did not return: {inside}")
        return (f"time limit passed {late:.0f} s ago while step {self.step + 1} was still in "
                f"its collectives (longest step so far {self.longest_step:.2f} s): a link "
                "dead or far slower than before?")

    def stop(self) -> None:
        """Once the summary is written a stall must not append a second, failed one."""
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(min(0.5, self.limit_s / 4)):
            if time.monotonic() - self.last > self.limit_s:
                inside = self.user_code()
                self.on_stall(f"no progress for {self.limit_s:.0f} s (watchdog)" + (
                    f": inside user code that did not return: {inside}" if inside else ""))
            late = self.overdue()
            if late:
                self.on_stall(late)


# --------------------------------------------------------------------------- training


STOP_CHECK_MAX_STEPS = 16


def next_stop_check(step: int, elapsed: float, limit: float) -> int | None:
    """The step after which the ranks next compare clocks, or None to stop now.

    A pure function of values every rank holds identically (the step count and the
    all-reduced elapsed time), so every rank schedules the same check.
    """
    if elapsed >= limit:
        return None
    per_step = elapsed / step
    ahead = int(0.25 * (limit - elapsed) / per_step) if per_step > 0 else STOP_CHECK_MAX_STEPS
    return step + max(1, min(ahead, STOP_CHECK_MAX_STEPS))


def _loss_and_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                      kind: str) -> tuple[torch.Tensor, int, int]:
    out = model(x)
    if kind == "lm":
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    loss = F.cross_entropy(out, y)
    return loss, int((out.argmax(-1) == y).sum()), y.numel()


def _batches(loader: DataLoader, sampler: DistributedSampler) -> Iterator[Any]:
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


@torch.no_grad()
def evaluate(model: nn.Module, data: Data, n: int, batch: int, rank: int, world: int,
             device: torch.device, beat: Any) -> tuple[float, float]:
    """Global accuracy and mean loss over the first ``n`` held-out samples."""
    was_training = model.training
    model.eval()
    idx = list(range(min(n, len(data.test))))[rank::world]
    batch = max(batch, EVAL_BATCH)
    loader = DataLoader(Subset(data.test, idx), batch_size=batch, shuffle=False)
    sums = torch.zeros(3, dtype=torch.float64)  # correct, count, loss*count
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss, correct, count = _loss_and_correct(model, x, y, data.kind)
        sums += torch.tensor([correct, count, loss.item() * count], dtype=torch.float64)
        beat()
    sums = sums.to(device)
    dist.all_reduce(sums)
    model.train(was_training)
    correct, count, loss_sum = sums.tolist()
    return correct / max(count, 1), loss_sum / max(count, 1)


def sgd_momentum(entry: registry.ModelEntry, spec: methods.MethodSpec, error_feedback: bool) -> float:
    """The model's SGD momentum, 0 for a method whose error feedback corrects momentum
    (dgc) when it is on (see module docstring)."""
    return 0.0 if spec.momentum_correction and error_feedback else entry.momentum


def make_optimizer(model: nn.Module, entry: registry.ModelEntry, lr: float,
                   momentum: float) -> torch.optim.Optimizer:
    if entry.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=entry.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                           weight_decay=entry.weight_decay)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Setup:
    """What set-up hands to training; ``phases`` holds the seconds of each set-up phase."""

    rank: int
    world: int
    data: Data
    ddp: DDP | None  # None in payload mode
    state: Any
    opt: torch.optim.Optimizer | None
    sampler: DistributedSampler
    loader: DataLoader
    device: torch.device
    backend: str
    info: Any
    lr: float
    entry: registry.ModelEntry
    momentum: float
    knobs: dict[str, Any]
    phases: dict[str, float] = field(default_factory=dict)
    recorded: recorded_gradient.RecordedGrads | None = None
    payload: payload_mode.PayloadSteps | None = None


def setup(args: argparse.Namespace) -> Setup:
    """Data and model, then rendezvous, DDP and the first barrier, each phase timed.

    Everything that can refuse a bad argument (dataset, batch size against the shard) comes
    before the rendezvous, so a refused rank exits 2 without a process group to tear down.
    """
    phases: dict[str, float] = {}
    t = time.perf_counter()
    torch.set_num_threads(args.threads)
    rank, world = _rendezvous_env()
    data, sampler, loader = _data(args, rank, world)
    torch.manual_seed(args.seed)
    if args.grads == "payload":
        return _payload_setup(args, rank, world, data, sampler, loader, t)
    entry, model = _model(args, data)
    knobs = entry.resolve_knobs(args.knobs)
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)  # after every refusal: none leaves a folder
    info = model_info(model)
    device, backend = _device(args)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model.to(device)
    phases["data_model"] = time.perf_counter() - t

    _rendezvous(args, backend, rank, world, phases)

    t = time.perf_counter()
    ddp, state = _ddp(args, model, device)
    lr = args.lr or entry.lr
    momentum = sgd_momentum(entry, args.spec, not args.no_error_feedback)
    opt = make_optimizer(ddp, entry, lr, momentum)
    phases["ddp"] = time.perf_counter() - t

    rec = None
    if args.grads == "recorded":  # one real local gradient, nothing sent (workloads.recorded_gradient)
        t = time.perf_counter()
        rec = _record(ddp, loader, device, data.kind)
        phases["record"] = time.perf_counter() - t

    t = time.perf_counter()
    dist.barrier()
    phases["barrier"] = time.perf_counter() - t
    return Setup(rank, world, data, ddp, state, opt, sampler, loader, device, backend, info,
                 lr, entry, momentum, knobs, {k: round(v, 4) for k, v in phases.items()}, rec)


def _payload_setup(args: argparse.Namespace, rank: int, world: int, data: Data,
                   sampler: DistributedSampler, loader: DataLoader, t: float) -> Setup:
    """Payload mode's set-up (``workloads.payload``): the model on the meta device, DDP's
    bucket layout from its shapes, the method's hook without DDP; no gradient, no data."""
    phases: dict[str, float] = {}
    with torch.device("meta"):
        entry, model = _model(args, data)
    knobs = entry.resolve_knobs(args.knobs)
    lay = payload_mode.layout(model, lambda m: _meta_loss(m, data, args.batch_size))
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    info = model_info(model)
    device, backend = _device(args)
    phases["data_model"] = time.perf_counter() - t

    _rendezvous(args, backend, rank, world, phases)

    t = time.perf_counter()
    extra: dict[str, Any] = {"convergence": args.convergence} if args.convergence else {}
    pacer = accelerator.Pacer(args.timing, lay.elements)
    try:
        state, hook = hooks.build(args.spec, lay.elements, device, payload=True, pacer=pacer,
                                  seed=args.seed, **extra)
    except ValueError as e:
        bad_args(f"argument --method: {e}")
    steps = payload_mode.PayloadSteps(lay, state, hook, device)
    phases["ddp"] = time.perf_counter() - t

    t = time.perf_counter()
    dist.barrier()
    phases["barrier"] = time.perf_counter() - t
    momentum = sgd_momentum(entry, args.spec, not args.no_error_feedback)
    return Setup(rank, world, data, None, state, None, sampler, loader, device, backend, info,
                 args.lr or entry.lr, entry, momentum, knobs,
                 {k: round(v, 4) for k, v in phases.items()}, None, steps)


def _meta_loss(model: nn.Module, data: Data, batch: int) -> torch.Tensor:
    """A scalar loss of one forward of ``model`` on meta tensors of the data's shape."""
    if data.kind == "lm":
        x = torch.zeros(batch, *data.input_shape, dtype=torch.long, device="meta")
    else:
        x = torch.empty(batch, *data.input_shape, device="meta")
    out = model(x)
    out = out if isinstance(out, torch.Tensor) else out[0]
    return out.float().sum()


def _rendezvous(args: argparse.Namespace, backend: str, rank: int, world: int,
                phases: dict[str, float]) -> None:
    """The process group (env://), its timeout on the real clock; its seconds in ``phases``."""
    t = time.perf_counter()
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=clock.real_s(args.pg_timeout)))
    phases["rendezvous"] = time.perf_counter() - t


def _rendezvous_env() -> tuple[int, int]:
    """This rank and the world size from ``env://``'s variables; alone (no WORLD_SIZE), a
    world of one on loopback."""
    if "WORLD_SIZE" not in os.environ:  # alone: rendezvous with ourselves on loopback
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _data(args: argparse.Namespace, rank: int,
          world: int) -> tuple[Data, DistributedSampler, DataLoader]:
    """The dataset and this rank's shard of it; exit 2 when it cannot be read or the batch
    is larger than the shard."""
    try:
        data = load_dataset(args.dataset, data_dir=args.data_dir, context=args.context)
    except DatasetError as e:
        bad_args(f"argument --dataset/--data-dir: {e}")
    sampler = DistributedSampler(data.train, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(data.train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        bad_args(f"argument --batch-size: {args.batch_size} exceeds this rank's shard of "
                 f"{len(sampler)} samples")
    return data, sampler, loader


def _model(args: argparse.Namespace, data: Data) -> tuple[registry.ModelEntry, nn.Module]:
    """The model's registry entry and the model built for ``data``; exit 2 (the error's
    first line) when it does not fit the data or its knobs are refused."""
    try:
        entry = registry.model_entry(args.model)
        if not registry.fits(entry, registry.dataset_entry(args.dataset)):
            raise registry.RegistryError(
                f"dataset {args.dataset!r} (kind {data.kind}) does not fit model "
                f"{args.model!r}; accepted kinds: {', '.join(entry.kinds)}")
        model = build_model(args.model, input_shape=data.input_shape,
                            num_classes=data.num_classes, **args.knobs)
    except (registry.RegistryError, TypeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        bad_args(f"argument --model/--model-args: {first}")
    return entry, model


def _device(args: argparse.Namespace) -> tuple[torch.device, str]:
    """The torch device and the process group's backend (``choose_device``); exit 2 for a
    pair this machine cannot give."""
    try:
        available = torch.cuda.is_available()
        dtype, index, backend = choose_device(
            args.device, args.backend, available,
            torch.cuda.device_count() if available else 0,
            int(os.environ.get("LOCAL_RANK", "0")))
    except ValueError as e:
        bad_args(str(e))
    return (torch.device("cuda", index) if dtype == "cuda" else torch.device("cpu")), backend


def _ddp(args: argparse.Namespace, model: nn.Module, device: torch.device) -> tuple[DDP, Any]:
    """DDP around ``model`` with the method's hook registered (its state: statistics,
    the pacer of an emulated accelerator). With recorded gradients DDP does not broadcast
    the module's buffers each forward (``workloads.recorded_gradient``: they never change there).

    DDP's start-up broadcast of the whole model from rank 0 is skipped when every rank
    already holds the same parameters (each builds the model after the same seed): over a
    dilated emulated link it sends the model to every rank at ``1/k`` of the rate (ResNet-18
    to 8 ranks: most of a minute, VGG-16: many) to change nothing."""
    same = _same_start(model, device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              init_sync=not same, forward_sync_buffers=args.grads != "recorded")
    extra: dict[str, Any] = {"convergence": args.convergence} if args.convergence else {}
    if args.timing is not None:
        extra["pacer"] = accelerator.Pacer(
            args.timing, sum(p.numel() for p in model.parameters() if p.requires_grad))
    state = hooks.register(ddp, args.spec, error_feedback=not args.no_error_feedback,
                           seed=args.seed, **extra)  # random-k draws its shared indices from seed
    return ddp, state


def _same_start(model: nn.Module, device: torch.device) -> bool:
    """Whether every rank's parameters and buffers are the same, by their sums (float64,
    one per tensor) compared across the ranks: one tiny collective instead of the model
    (the maximum of the sums and of their negatives: every rank's equals the largest and
    the smallest)."""
    tensors = [*model.parameters(), *model.buffers()]
    if not tensors:
        return True
    sums = torch.stack([t.detach().double().sum() for t in tensors]).to(device)
    both = torch.cat([sums, -sums])
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return bool(torch.equal(both, torch.cat([sums, -sums])))


def _record(ddp: DDP, loader: DataLoader, device: torch.device,
            kind: str) -> recorded_gradient.RecordedGrads:
    """One real local gradient of the first batch (nothing sent), installed as every
    step's gradient (workloads.recorded_gradient)."""
    x, y = next(iter(loader))
    x, y = x.to(device), y.to(device)
    with ddp.no_sync():
        rec = recorded_gradient.record(ddp, lambda: _loss_and_correct(ddp, x, y, kind)[0])
    recorded_gradient.install(ddp.module, rec)
    return rec


@dataclass
class Outcome:
    """How training ended (the fields of the ``ok`` summary record)."""

    steps: int = 0
    samples: int = 0
    accuracy: float | None = None
    target_t: float | None = None
    train_time_s: float = 0.0
    final_eval_s: float = 0.0


def train(args: argparse.Namespace, s: Setup, log: RecordLog, watchdog: Watchdog,
          origin: float, out: Outcome) -> None:
    """The step loop, the periodic evaluations and the closing one; fills ``out``."""
    do_eval = _evaluator(args, s, log, watchdog, origin, out)
    if s.ddp is not None:
        s.ddp.train()
    pacer = s.state.pacer
    between = True  # an evaluation or the stop agreement since the last step (the pacer)
    batches = _batches(s.loader, s.sampler) if s.payload is None else iter(())
    step = 0
    elapsed_max = torch.zeros(1, device=s.device)
    next_check: int | None = 1
    zero_steps = 0
    while args.steps is None or step < args.steps:
        t0 = clock.now()
        if pacer is not None:
            pacer.start_step(follows=not between)
            between = False
        loss_v, zero_steps, stats = _step(s, batches, step + 1, zero_steps)
        step_s = clock.now() - t0
        step += 1
        out.steps = step
        out.samples += args.batch_size * s.world
        _log_step(log, step, args.batch_size * s.world, step_s, loss_v, stats)
        watchdog.stepped(step, clock.real_s(step_s))
        if args.eval_every and step % args.eval_every == 0:
            between = True
            do_eval(step)
            if args.stop_at_target and out.target_t is not None:
                break  # the accuracy is global, so every rank stops after this step
        if args.time_limit is not None and step >= next_check:
            between = True
            elapsed_max.fill_(clock.now() - origin)
            dist.all_reduce(elapsed_max, op=dist.ReduceOp.MAX)
            next_check = next_stop_check(step, elapsed_max.item(), args.time_limit)
            if next_check is None:
                break
    out.train_time_s = clock.now() - origin
    trains = s.recorded is None and s.payload is None
    if trains and not (args.eval_every and step % args.eval_every == 0):
        t = clock.now()
        do_eval(step)
        out.final_eval_s = clock.now() - t


def _evaluator(args: argparse.Namespace, s: Setup, log: RecordLog, watchdog: Watchdog,
               origin: float, out: Outcome) -> Callable[[int], None]:
    """An evaluation at a step: its record, the target's first time and the accuracy into
    ``out``; the watchdog's deadline extended by the evaluation's time."""

    def do_eval(step: int) -> None:
        t_eval = clock.now()
        try:
            _do_eval(step, t_eval)
        finally:
            watchdog.extend(clock.real_s(clock.now() - t_eval))

    def _do_eval(step: int, t_eval: float) -> None:
        acc, loss = evaluate(s.ddp.module, s.data, args.eval_samples, args.batch_size, s.rank,
                             s.world, s.device, watchdog.beat)
        reached = None if args.target_accuracy is None else acc >= args.target_accuracy
        if reached and out.target_t is None:
            out.target_t = clock.now() - origin
        log.write(EvalRecord(step=step, accuracy=acc, loss=loss,
                             eval_s=clock.now() - t_eval,
                             samples_evaluated=min(args.eval_samples, len(s.data.test)),
                             reached_target=reached))
        out.accuracy = acc

    return do_eval


def _step(s: Setup, batches: Iterator[Any], step: int,
          zero_steps: int) -> tuple[float | None, int, dict[str, Any]]:
    """One step's work, each part held to the pacer where there is one: forward, backward
    (the hook's collectives), the health check, the optimizer. Returns the loss (None with
    recorded gradients), the count of leading zero-gradient steps and the hook's statistics."""
    pacer = s.state.pacer
    if s.payload is not None:  # DDP's part only: the hook's buckets (workloads.payload)
        pacer.forward_done()
        s.payload.backward()
        pacer.backward_done()
        pacer.optimizer_done()
        return None, zero_steps, dict(s.state.pop_step_stats())
    s.opt.zero_grad(set_to_none=True)
    if s.recorded is None:
        x, y = next(batches)
        x, y = x.to(s.device), y.to(s.device)
        loss, _, _ = _loss_and_correct(s.ddp, x, y, s.data.kind)
    else:  # the surrogate: DDP's forward, the recorded gradient (workloads.recorded_gradient)
        loss = s.ddp()
    if pacer is not None:
        _sync(s.device)
        pacer.forward_done()
    loss.backward()
    if pacer is not None:
        pacer.backward_done()
    loss_v = loss.item() if s.recorded is None else None
    zero_steps = check_health(s.ddp, 0.0 if loss_v is None else loss_v, step, zero_steps)
    if s.recorded is None:  # recorded: the parameters stay (the pacer holds the slot)
        s.opt.step()
    if pacer is not None:
        _sync(s.device)
        pacer.optimizer_done()
    return loss_v, zero_steps, dict(s.state.pop_step_stats())


def _log_step(log: RecordLog, step: int, samples: int, step_s: float, loss_v: float | None,
              stats: dict[str, Any]) -> None:
    """The step's record: its time split into comm (the hook's) and compute (the rest)."""
    # The hook counts its collectives since the last pop, so one issued between two steps
    # (the stop-flag agreement, an evaluation) lands in the next step's figure; the
    # step's own communication cannot outlast the step.
    comm_s = min(float(stats.pop("comm_s", 0.0)), step_s)
    log.write(StepRecord(step=step, samples=samples,
                         compute_s=max(step_s - comm_s, 0.0), comm_s=comm_s, step_s=step_s,
                         bytes_sent=stats.pop("bytes_sent", 0),
                         kept_ratio=stats.pop("kept_ratio", 1.0),
                         level=stats.pop("level", "none"), loss=loss_v, stats=stats))


def _sync(device: torch.device) -> None:
    """Waits for the device's queued work, so a pacing point sees the work done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_health(model: nn.Module, loss: float, step: int, zero_steps: int) -> int:
    """Raise TrainingFault for a diverged or frozen run (module doc, Health); returns the
    count of leading steps whose reduced gradient was exactly zero."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = float(torch.stack(torch._foreach_norm(grads)).sum()) if grads else 0.0
    if not (math.isfinite(loss) and math.isfinite(norm)):
        what = [f"{name} {v}" for name, v in (("loss", loss), ("gradient norm", norm))
                if not math.isfinite(v)]
        raise TrainingFault(f"diverged at step {step}: {', '.join(what)}")
    if norm == 0.0 and zero_steps == step - 1:
        zero_steps += 1
        if zero_steps >= ZERO_GRAD_STEPS:
            raise TrainingFault(
                f"not learning: the reduced gradient is exactly zero at steps 1-{step} (a "
                "codec whose payload aliases its input, or a hook returning zeros?)")
    return zero_steps


def run(args: argparse.Namespace) -> int:
    """Set up, train, write the summary; returns the exit code (the caller leaves with it)."""
    t_launch = time.perf_counter()
    s = setup(args)
    setup_s = time.perf_counter() - t_launch
    origin = clock.now()  # the training clock: virtual under dilation (netsenseml.clock)
    log = RecordLog(Path(args.log_dir) / f"rank{s.rank}.jsonl", origin)
    out = Outcome()

    def fail(reason: str) -> NoReturn:
        try:  # the record may not fit (a full disk): the reason still goes to stderr
            log.write(SummaryRecord(steps=out.steps, samples=out.samples, status="failed",
                                    train_time_s=clock.now() - origin, error=reason))
            log.close()
        except OSError as exc:
            reason = f"{reason} (record not written: {exc.strerror or exc})"
        print(f"rank {s.rank}: FAILED: {reason}", file=sys.stderr, flush=True)
        os._exit(1)  # a broken process group can hang in teardown; leave now

    watchdog = Watchdog(clock.real_s(2 * args.pg_timeout + 10), fail,
                        None if args.time_limit is None else clock.real_s(args.time_limit),
                        user_code=s.state.user_code_stuck)
    watchdog.start()

    log.write(StartRecord(
        rank=s.rank, world_size=s.world, model=args.model, dataset=args.dataset,
        method=args.method, params=s.info.params, grad_bytes=s.info.grad_bytes,
        batch_size=args.batch_size, seed=args.seed, host=socket.gethostname(),
        torch=torch.__version__, backend=s.backend, device=str(s.device),
        optimizer=s.entry.optimizer, lr=s.lr,
        momentum=s.momentum if s.entry.optimizer == "sgd" else None,
        pg_timeout_s=args.pg_timeout, setup_s=setup_s, proc_wall=PROC_WALL,
        imports_s=t_launch - PROC_T0, phases=s.phases, knobs=s.knobs,
        context=args.context, eval_samples=args.eval_samples,
        error_feedback=not args.no_error_feedback,
        convergence=(s.state.policy.prior.summary()
                     if hasattr(s.state.policy, "prior") else None),
        accelerator=None if args.timing is None else args.timing.to_json(),
        dilation=clock.dilation(), grads=args.grads,
        recorded_loss=None if s.recorded is None else s.recorded.loss))
    say(f"rank {s.rank}/{s.world} model={args.model} params={s.info.params} "
        f"grad_bytes={s.info.grad_bytes} grad_MB={s.info.grad_bytes / 1e6:.2f} "
        f"dataset={args.dataset} method={args.method} backend={s.backend}")

    try:
        train(args, s, log, watchdog, origin, out)
    except TrainingFault as e:
        fail(str(e))
    except Exception as e:  # a dead peer or timed-out collective surfaces here
        fail(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    watchdog.stop()
    log.write(SummaryRecord(steps=out.steps, samples=out.samples, status="ok",
                            final_accuracy=out.accuracy, train_time_s=out.train_time_s,
                            target_reached_t=out.target_t, final_eval_s=out.final_eval_s))
    log.close()
    say(f"rank {s.rank}: done steps={out.steps} final_accuracy={out.accuracy} "
        f"log={args.log_dir}")
    return 0


def leave(code: int) -> NoReturn:
    """Exit the process without interpreter finalization (module docstring, "Exit").

    ``netsenseml.lifecycle.shutdown``: after a finished run the process group is destroyed
    first, while the interpreter is whole; after a failed set-up it is not touched (a
    half-built group can hang). The worker registers no ``atexit`` handlers of its own, and
    none of the libraries' must run after the records are closed, so they are skipped.
    """
    lifecycle.shutdown(code, run_atexit=False)


def main(argv: list[str] | None = None) -> NoReturn:
    """Parse, run and leave: never returns (it ends the process, see ``leave``)."""
    args = parse_args(argv)
    clock.set_dilation(args.dilation)
    try:
        code = run(args)
    except Exception as e:  # setup failed (rendezvous timeout, peer gone before training)
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"workloads.train: FAILED during setup: {type(e).__name__}: {first}",
              file=sys.stderr, flush=True)
        code = 1
    leave(code)


if __name__ == "__main__":
    main()
