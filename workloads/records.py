"""The worker's JSONL records as code: what ``workloads.train`` writes and what the testbed
(orchestration, analysis, emulation counters) reads.

Why typed records in one torch-free module: the format used to be prose in the worker's
docstring, written with keyword arguments in one place and read back with ``.get("...")``
in many; a renamed field broke a reader silently. Here each record kind is one dataclass,
its fields are the format, the worker builds them, and every reader parses them with
:func:`parse` (stdlib only: the orchestrator and the analysis never import torch).

Files: ``<log dir>/rank<N>.jsonl``, one JSON object per line, flushed when written.
Every record has ``kind``, ``t`` (seconds since the worker's origin, taken after set-up, the
rendezvous and the first barrier, so all ranks share it to within the barrier's skew) and
``wall`` (``time.time()`` when written). The kinds, in the order a rank writes them:

- :class:`StartRecord` (one): what runs (model, method, sizes, versions) and the set-up's
  phases in seconds (``phases``: data_model, rendezvous = ``init_process_group``, ddp = DDP +
  hook + optimizer + loader, barrier = the first barrier; ``setup_s`` is their sum);
  ``proc_wall`` is the wall clock when the interpreter reached the worker module, before
  ``import torch``, and ``imports_s`` the time from there to ``run()``.
- :class:`StepRecord` (one per training step): the worker's timings and the hook's
  statistics (``netsenseml.hooks.NetSenseState.pop_step_stats``); a hook stat whose name the
  worker owns is logged as ``hook_<name>``.
- :class:`EvalRecord` (one per evaluation, the closing one included): global accuracy
  (next-character accuracy for a language model) and loss on the held-out samples.
- :class:`SummaryRecord` (the last record): ``ok`` or ``failed`` (+ ``error``).

Units are the last word of a name: ``_s`` seconds, ``_bytes`` bytes, ``_mbit`` Mbit/s (a
rate); a count is named for what it counts (``bytes_sent``, ``samples``, ``collectives``).
Records written before this rule (``est_rate_Bps``, ``est_bdp_B``, ``model_*_ms``,
``model_bw_MBps``) are read under the new names (:data:`LEGACY_STEP_KEYS`), so old run
folders still load and plot.

Reading is tolerant: a field that is missing or of the wrong type reads as its default
(``None``), an unknown kind parses to ``None``; a damaged record never stops a reader.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

#: Old step-stat names -> (new name, factor from the old unit to the new one).
LEGACY_STEP_KEYS: dict[str, tuple[str, float]] = {
    "est_rate_Bps": ("est_rate_mbit", 8e-6),
    "est_bdp_B": ("est_bdp_bytes", 1.0),
    "model_fixed_ms": ("model_fixed_s", 1e-3),
    "tcp_delivery_rate_Bps": ("tcp_delivery_rate_mbit", 8e-6),
    "model_rate_MBps": ("model_rate_mbit", 8.0),
    "model_allgather_MBps": ("model_allgather_mbit", 8.0),
    "model_fixed_allreduce_ms": ("model_fixed_allreduce_s", 1e-3),
    "model_fixed_allgather_ms": ("model_fixed_allgather_s", 1e-3),
    "model_bw_MBps": ("model_bw_mbit", 8.0),
    "model_compute_ms": ("model_compute_s", 1e-3),
    "model_codec_ms": ("model_codec_s", 1e-3),
    "model_step_ms": ("model_step_s", 1e-3),
    "model_none_step_ms": ("model_none_step_s", 1e-3),
}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _coerce(kind: str, v: Any) -> Any:
    """A JSON value as the field's type (the annotation's first word), else None."""
    if kind == "float":
        return _num(v)
    if kind == "int":
        n = _num(v)
        return int(n) if n is not None else None
    if kind == "str":
        return v if isinstance(v, str) else None
    if kind == "bool":
        return v if isinstance(v, bool) else None
    if kind == "dict":
        return dict(v) if isinstance(v, dict) else {}
    return v


def _kind_of(annotation: str) -> str:
    return annotation.split("[")[0].split("|")[0].strip()


@dataclass
class Record:
    """Fields every record has (module doc)."""

    KIND: ClassVar[str] = ""
    #: fields left out of the JSON when they are None (present only when they apply)
    OMIT_NONE: ClassVar[tuple[str, ...]] = ()

    t: float | None = None
    wall: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as one JSONL object (``kind`` first)."""
        out: dict[str, Any] = {"kind": self.KIND}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in self.OMIT_NONE:
                continue
            out[f.name] = v
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Record:
        known = {f.name: _coerce(_kind_of(str(f.type)), d.get(f.name))
                 for f in dataclasses.fields(cls) if f.name in d}
        return cls(**known)


@dataclass
class StartRecord(Record):
    """What the rank runs and what its set-up cost (module doc)."""

    KIND: ClassVar[str] = "start"
    OMIT_NONE: ClassVar[tuple[str, ...]] = ("convergence", "accelerator", "recorded_loss",
                                            "own_job")

    rank: int | None = None
    world_size: int | None = None
    model: str | None = None
    dataset: str | None = None
    method: str | None = None
    params: int | None = None
    grad_bytes: int | None = None
    batch_size: int | None = None
    seed: int | None = None
    host: str | None = None
    torch: str | None = None
    backend: str | None = None
    device: str | None = None
    optimizer: str | None = None
    lr: float | None = None
    momentum: float | None = None  # None for optimizers without one (AdamW)
    pg_timeout_s: float | None = None
    setup_s: float | None = None
    proc_wall: float | None = None
    imports_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)  # the model's resolved size knobs
    context: int | None = None
    eval_samples: int | None = None
    error_feedback: bool | None = None
    #: the convergence prior the policy uses (netsenseml only): source, resolution, factors
    convergence: dict[str, Any] | None = None
    #: the emulated accelerator's step timing (netsenseml.accelerator), None when native
    accelerator: dict[str, Any] | None = None
    #: the time-dilation factor: the worker's clock is real time / dilation
    dilation: float = 1.0
    #: real: every step's gradient computed; recorded: one real gradient handed to DDP every
    #: step (workloads.recorded_gradient; throughput only, the model does not train)
    grads: str = "real"
    #: with recorded gradients: the loss of the real step that made them
    recorded_loss: float | None = None
    #: True for an own job's records (``netsenseml.job``), absent for the built-in worker's
    own_job: bool | None = None


#: Step-record fields the worker owns; a hook stat of the same name is logged as hook_<name>.
STEP_OWNED = ("kind", "t", "wall", "step", "samples", "compute_s", "step_s", "loss")


@dataclass
class StepRecord(Record):
    """One training step: ``compute_s = max(step_s - comm_s, 0)`` (``workloads.train``,
    "compute_s"); ``samples`` is the step's *global* samples (batch x world size);
    ``stats`` holds every other hook statistic, written flat beside the fields."""

    KIND: ClassVar[str] = "step"

    step: int | None = None  # 1-based
    samples: int | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    step_s: float | None = None
    bytes_sent: int | None = None
    kept_ratio: float | None = None
    level: str | None = None
    loss: float | None = None  # this rank's
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        stats = out.pop("stats")
        for k, v in stats.items():
            key = f"hook_{k}" if k in STEP_OWNED or k in out else k
            out[key] = v
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StepRecord:
        rec = super().from_json(d)
        assert isinstance(rec, StepRecord)
        names = {f.name for f in dataclasses.fields(cls)} | {"kind"}
        rec.stats = upgrade_step_keys({k: v for k, v in d.items() if k not in names})
        return rec


@dataclass
class EvalRecord(Record):
    """One evaluation of the model after step ``step``, on every rank's shard, summed."""

    KIND: ClassVar[str] = "eval"
    OMIT_NONE: ClassVar[tuple[str, ...]] = ("reached_target",)

    step: int | None = None
    accuracy: float | None = None
    loss: float | None = None
    eval_s: float | None = None
    samples_evaluated: int | None = None
    reached_target: bool | None = None  # only when a target accuracy is set


@dataclass
class SummaryRecord(Record):
    """How the rank's run ended; ``target_reached_t`` is None when the target was not
    reached (or none was set); ``final_eval_s`` is 0 when the last step's periodic
    evaluation stands for the closing one."""

    KIND: ClassVar[str] = "summary"
    OMIT_NONE: ClassVar[tuple[str, ...]] = ("error", "final_eval_s", "samples_from")

    steps: int | None = None
    samples: int | None = None
    status: str | None = None  # "ok" | "failed"
    final_accuracy: float | None = None
    train_time_s: float | None = None
    target_reached_t: float | None = None
    final_eval_s: float | None = None
    error: str | None = None  # when failed
    #: an own job's samples came from: "report", "scenario", "model input" (netsenseml.job)
    samples_from: str | None = None


KINDS: dict[str, type[Record]] = {
    cls.KIND: cls for cls in (StartRecord, StepRecord, EvalRecord, SummaryRecord)}


def upgrade_step_keys(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Step statistics with :data:`LEGACY_STEP_KEYS` renamed and converted (module doc)."""
    out = dict(stats)
    for old, (new, factor) in LEGACY_STEP_KEYS.items():
        if old in out:
            v = out.pop(old)
            if new not in out:
                n = _num(v)
                out[new] = n * factor if n is not None else v
    return out


def parse(d: Any) -> Record | None:
    """One JSON object as its typed record; None for anything that is not a known kind."""
    if not isinstance(d, Mapping):
        return None
    cls = KINDS.get(d.get("kind"))  # type: ignore[arg-type]
    return cls.from_json(d) if cls is not None else None


@dataclass
class RankRecords:
    """One rank's records by kind, in file order (the summary: the last one written)."""

    start: StartRecord | None = None
    steps: list[StepRecord] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    summary: SummaryRecord | None = None

    @classmethod
    def parse(cls, raw: Iterable[Any]) -> RankRecords:
        out = cls()
        for rec in map(parse, raw):
            if isinstance(rec, StartRecord):
                out.start = out.start or rec
            elif isinstance(rec, StepRecord):
                out.steps.append(rec)
            elif isinstance(rec, EvalRecord):
                out.evals.append(rec)
            elif isinstance(rec, SummaryRecord):
                out.summary = rec
        return out
