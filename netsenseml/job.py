"""Your own DDP job under the testbed: the run's method, the records and what only the job
knows, all through ``hooks.register(model)``.

The testbed starts a user's script in every emulated host as torchrun would (RANK,
WORLD_SIZE, MASTER_ADDR/PORT, LOCAL_RANK ...) and says through the environment what a
built-in worker gets on its command line:

==========================  ===========================================================
``NETSENSE_METHOD``         the run's method: ``hooks.register(model)`` with no method
                            named takes it (outside the testbed: ``allreduce``, DDP's own)
``NETSENSE_RECORDS``        a folder: the hook writes ``rank<RANK>.jsonl`` there
``NETSENSE_TARGET_ACCURACY`` the scenario's target: evaluation records say when it is reached
``NETSENSE_STEP_MS``        an emulated accelerator's step time (ms): the hook paces what it can
``NETSENSE_DILATION``       the time-dilation factor (``netsenseml.clock`` reads it itself)
``NETSENSE_SEED``           the run's seed, for the job to use if it wants
``NETSENSE_SAMPLES``        the scenario's samples per rank and step
                            (``workload.samples_per_step``), for a job that reports none
``NETSENSE_STACK_FILE``     where the rank writes its Python stacks when the testbed asks
                            (a hang at the deadline; ``netsenseml.lifecycle``)
==========================  ===========================================================

The records are the built-in worker's format (``workloads.records``: start, step, eval,
summary; one JSON object per line), written here with the same field names because this
library never imports the testbed's packages. Under torchrun nothing of this is set, and
``register`` behaves as before (setting ``NETSENSE_RECORDS`` yourself gives the same
records outside the testbed).

**What a step is.** The testbed does not run the job's loop, so a step is what the hook
sees: a step begins when DDP hands it bucket 0 of a backward pass and ends when bucket 0
of the next backward arrives. ``step_s`` is therefore the loop's *period* (the rest of the
backward, the wait for the last collective, the optimizer, data loading and the next
forward, up to the next bucket 0): the same mean as a step measured from its start, shifted
by a forward pass. The last step ends at the later of its last collective's completion and
the job's last :func:`report`; the record is written at process exit (``atexit``, which
``hooks.clean_exit``/``hooks.shutdown`` run too) or at ``report(final=True)``. A backward
under ``no_sync()`` (gradient accumulation) calls no hook: its micro-steps are one step.
``compute_s = max(step_s - comm_s, 0)`` as for the built-in worker.

**What only the job knows** (:func:`JobRecorder.report`): ``samples`` (this rank's samples in
the step; the record holds samples x world size, equal shares as a DistributedSampler
gives), ``loss`` (the step's, this
rank's) and ``accuracy`` (held-out, an evaluation record on the current step: time to
accuracy counts from it). A report belongs to the step whose backward began last.

**Samples without a report.** A job that never reports samples still gets samples/s, from,
in this order: the scenario's ``workload.samples_per_step`` (``NETSENSE_SAMPLES``), else
what the hook sees of the job's data: the first dimension of the first tensor the DDP
model's training forward passes are given (a forward pre-hook; forward passes under
``torch.no_grad`` or in ``eval()`` mode are not counted, those of ``no_sync()`` micro-steps
are), the forward passes before a step's backward counting to that step. The summary
record says which (``samples_from``: ``report``, ``scenario``, ``model input``; none when
no step had any). A model whose first input is not batch-first (a sequence-first RNN) is
miscounted: report samples, or state them in the scenario.

**The emulated accelerator** (``NETSENSE_STEP_MS``; ``netsenseml.accelerator``): the hook
paces what passes through it. Bucket ``i`` is released at its profiled share of the
backward pass after the step's virtual start and each bucket's codec work takes its
profiled time, as in the built-in worker; the step's virtual start is the previous
backward's end (its last collective done) plus the profile's optimizer time, so bucket 0
is held until the optimizer, data loading and the forward pass together took their
profiled ``optimizer_s + forward_s``: the three are paced as one slot, never one by one.
What it cannot pace: anything the job does outside its steps (evaluation, checkpoints,
logging between steps count into that slot and show as overruns), the last step's
optimizer, and a hook method's own codec (PowerSGD, plug-in hooks).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from netsenseml import accelerator, clock, lifecycle

ENV_METHOD = "NETSENSE_METHOD"
ENV_RECORDS = "NETSENSE_RECORDS"
ENV_TARGET = "NETSENSE_TARGET_ACCURACY"
ENV_STEP_MS = "NETSENSE_STEP_MS"
ENV_SEED = "NETSENSE_SEED"
ENV_SAMPLES = "NETSENSE_SAMPLES"
#: Without the testbed and without a method named: DDP's own fp32 allreduce.
DEFAULT_METHOD = "allreduce"

_current: JobRecorder | None = None


def default_method() -> str:
    """The run's method (``NETSENSE_METHOD``), else :data:`DEFAULT_METHOD`."""
    return os.environ.get(ENV_METHOD, "").strip() or DEFAULT_METHOD


def env_timing() -> accelerator.Timing | None:
    """The emulated accelerator's timing the testbed passed (``NETSENSE_STEP_MS``), or None."""
    text = os.environ.get(ENV_STEP_MS, "").strip()
    if not text:
        return None
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(f"{ENV_STEP_MS}: a number of milliseconds expected, got {text!r}") from None
    return accelerator.Timing.from_step(ms / 1e3)


def current() -> JobRecorder | None:
    """The recorder of this process's first registered hook, when the testbed asked for one."""
    return _current


def _proc_start_wall() -> float | None:
    """This process's start as a wall time (``/proc/self/stat``: clock ticks since boot), for
    the launch phase. The boot's wall time is taken from ``CLOCK_BOOTTIME``, not from
    ``/proc/stat``'s ``btime``, whose whole seconds put the start up to 1 s early."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _clean(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


#: Step fields the recorder owns; a hook statistic of the same name is written hook_<name>
#: (``workloads.records.STEP_OWNED``).
_STEP_OWNED = ("kind", "t", "wall", "step", "samples", "compute_s", "step_s", "loss",
               "comm_s", "bytes_sent", "kept_ratio", "level")


class JobRecorder:
    """Writes one rank's records of an own job (module docstring)."""

    def __init__(self, state: Any, ddp_model: Any, path: Path, method: str) -> None:
        self.state = state
        self.path = path
        self.world = int(state.world_size)
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        target = os.environ.get(ENV_TARGET, "").strip()
        self.target = float(target) if target else None
        self._lock = threading.RLock()
        self.origin = clock.now()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - lives for the job
        self.step_start: float | None = None  # bucket 0 of the step in progress
        self.steps = 0
        self.samples_total = 0
        self.accuracy: float | None = None
        self.target_t: float | None = None
        self.last_report: float | None = None
        self._samples: int | None = None
        self._loss: float | None = None
        stated = os.environ.get(ENV_SAMPLES, "").strip()
        self.stated = int(stated) if stated.isdigit() and int(stated) > 0 else None
        self._seen = 0  # samples of the training forwards since the last backward began
        self._step_seen = 0  # ... of those before the step in progress
        self.samples_from: set[str] = set()
        ddp_model.register_forward_pre_hook(self._forward)
        self.closed = False
        self._error: str | None = None
        params = [p for p in ddp_model.parameters() if p.requires_grad]
        n = sum(p.numel() for p in params)
        grad_bytes = sum(p.numel() * p.element_size() for p in params)
        proc_wall = _proc_start_wall()
        pacer = state.pacer
        self._write({
            "kind": "start", "rank": self.rank, "world_size": self.world,
            "model": f"own job: {Path(sys.argv[0]).name if sys.argv and sys.argv[0] else 'python'}",
            "dataset": None, "method": method, "params": n, "grad_bytes": grad_bytes,
            "batch_size": None, "seed": None, "host": socket.gethostname(),
            "torch": torch.__version__, "backend": dist.get_backend() if dist.is_initialized() else None,
            "device": str(params[0].device) if params else None, "optimizer": None,
            "lr": None, "momentum": None, "pg_timeout_s": None,
            "setup_s": None if proc_wall is None else max(time.time() - proc_wall, 0.0),
            "proc_wall": proc_wall, "imports_s": None,
            # one phase: everything before hooks.register (imports, data, model,
            # init_process_group, DDP), which the testbed cannot tell apart in a job it
            # does not run
            "phases": {} if proc_wall is None else {"job_setup": max(time.time() - proc_wall, 0.0)},
            "knobs": {}, "context": None, "eval_samples": None,
            "error_feedback": state.error_feedback,
            **({"accelerator": pacer.timing.to_json()} if pacer is not None else {}),
            "dilation": clock.dilation(), "own_job": True, "argv": list(sys.argv),
        })
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.close)

    # ------------------------------------------------------------------ writing
    def _write(self, rec: dict[str, Any], at: float | None = None) -> None:
        """One record, stamped now or at the virtual time ``at`` (a step that ended
        earlier than its record is written: the last one)."""
        rec = dict(rec)
        now = clock.now()
        at = now if at is None else at
        rec["t"] = at - self.origin
        rec["wall"] = time.time() - clock.real_s(now - at)
        kind = rec.pop("kind")
        line = json.dumps({"kind": kind, **{k: _clean(v) for k, v in rec.items()}})
        with self._lock:
            if not self.fh.closed:
                self.fh.write(line + "\n")
                self.fh.flush()

    def _excepthook(self, etype: Any, value: Any, tb: Any) -> None:
        first = str(value).splitlines()[0] if str(value) else ""
        self._error = f"{etype.__name__}: {first}"
        self._prev_excepthook(etype, value, tb)

    # ------------------------------------------------------------------ steps
    def boundary(self, now: float) -> None:
        """Bucket 0 of a backward arrived (``NetSenseState.begin_bucket``): the previous
        step, if any, ends here; the next one begins."""
        with self._lock:
            if self.step_start is not None and not self.closed:
                self._step_record(now - self.step_start)
            self.step_start = now
            self._step_seen, self._seen = self._seen, 0

    def _forward(self, module: Any, args: Any) -> None:
        """A forward pass of the DDP model: its batch counted when it trains (module doc)."""
        if not (module.training and torch.is_grad_enabled()):
            return
        first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
        if first is not None:
            with self._lock:
                self._seen += int(first.shape[0])

    def _rank_samples(self) -> int | None:
        """This rank's samples of the step being recorded, and where they come from."""
        if self._samples is not None:
            self.samples_from.add("report")
            return self._samples
        if self.stated is not None:
            self.samples_from.add("scenario")
            return self.stated
        if self._step_seen:
            self.samples_from.add("model input")
            return self._step_seen
        return None

    def _step_record(self, step_s: float, at: float | None = None) -> None:
        stats = dict(self.state.pop_job_stats())
        self.steps += 1
        mine = self._rank_samples()
        samples = 0 if mine is None else mine * self.world
        self.samples_total += samples
        comm_s = min(float(stats.pop("comm_s", 0.0)), step_s)
        rec: dict[str, Any] = {
            "kind": "step", "step": self.steps, "samples": samples,
            "compute_s": max(step_s - comm_s, 0.0), "comm_s": comm_s, "step_s": step_s,
            "bytes_sent": stats.pop("bytes_sent", 0), "kept_ratio": stats.pop("kept_ratio", 1.0),
            "level": stats.pop("level", "none"), "loss": self._loss}
        for k, v in stats.items():
            rec[f"hook_{k}" if k in _STEP_OWNED else k] = v
        self._write(rec, at)
        self._samples = self._loss = None

    def report(self, samples: int | None = None, loss: float | None = None,
               accuracy: float | None = None, final: bool = False) -> None:
        """What only the job knows (module docstring); ``final``: the job's training is
        over, the last step and the summary are written now."""
        with self._lock:
            if self.closed:
                return
            self.last_report = clock.now()
            if samples is not None:
                self._samples = (self._samples or 0) + int(samples)
            if loss is not None:
                self._loss = float(_clean(loss))
            if accuracy is not None:
                acc = float(_clean(accuracy))
                reached = None if self.target is None else acc >= self.target
                if reached and self.target_t is None:
                    self.target_t = clock.now() - self.origin
                # the step whose backward began last; 0 before the first
                step = self.steps + (1 if self.step_start is not None else 0)
                self._write({"kind": "eval", "step": step, "accuracy": acc,
                             "loss": None if loss is None else float(_clean(loss)),
                             "eval_s": None, "samples_evaluated": None,
                             **({} if reached is None else {"reached_target": reached})})
                self.accuracy = acc
        if final:
            self.close()

    def close(self) -> None:
        """The last step's record and the summary (once; ``atexit`` or ``report(final=True)``)."""
        with self._lock:
            if self.closed:
                return
            end = clock.now()
            if self.step_start is not None:
                done = self.state.recorder.totals().last_done  # clock.now() of the last completion
                ends = [t for t in (done, self.last_report) if t is not None and t > self.step_start]
                end = max(ends) if ends else end
                self._step_record(end - self.step_start, at=end)
                self.step_start = None
            code = lifecycle.exit_code  # set by hooks.shutdown / clean_exit before atexit
            failed = self._error is not None or code not in (None, 0)
            error = self._error  # a non-zero exit's cause is in the job's log, not here
            last_t = end - self.origin
            self._write({"kind": "summary", "steps": self.steps, "samples": self.samples_total,
                         "status": "failed" if failed else "ok",
                         "final_accuracy": self.accuracy, "train_time_s": last_t,
                         "target_reached_t": self.target_t,
                         "samples_from": ", ".join(sorted(self.samples_from)) or None,
                         **({"error": error} if error else {})}, at=end)
            self.closed = True
            self.fh.close()


def attach(state: Any, ddp_model: Any, method: str) -> JobRecorder | None:
    """A recorder for ``state`` when the testbed asked for records (``NETSENSE_RECORDS``)
    and this process has none yet (a second DDP model of the job is not recorded)."""
    global _current
    folder = os.environ.get(ENV_RECORDS, "").strip()
    if not folder or _current is not None:
        return None
    rank = os.environ.get("RANK", "0")
    _current = JobRecorder(state, ddp_model, Path(folder) / f"rank{rank}.jsonl", method)
    # The job's own ending made safe and a hang made legible (netsenseml.lifecycle), also
    # where the job runner could not do it first (a job started as a fresh interpreter):
    # the records are closed before the group is destroyed, so a destroy that hangs
    # cannot cost a finished job its summary.
    lifecycle.on_destroy(_current.close)
    lifecycle.patch_destroy()
    lifecycle.dump_stacks_on()
    return _current


def report(samples: int | None = None, loss: float | None = None,
           accuracy: float | None = None, *, final: bool = False) -> None:
    """Records what only the job knows (module docstring); does nothing without a recorder
    (outside the testbed), so a job can call it unconditionally."""
    if _current is not None:
        _current.report(samples=samples, loss=loss, accuracy=accuracy, final=final)
