"""The worker's command-line options, importable without torch, for validation up front.

Why a list beside ``workloads.train.build_parser``: the scenario schema must refuse
``workload.args.<unknown>`` (and a value the worker's parser would reject) before any
network is built, and the orchestrator must not import torch (~2 s) to do so. The parser
lives in ``workloads/train.py``, which imports torch at the top. tests/workloads/
test_options.py checks that this table and the parser agree option by option (name,
flag-or-value, value type), so a new worker option fails that test until it is added here.

``ORCHESTRATOR`` options are set by the orchestrator from the scenario's own fields
(``workload.steps`` -> ``--steps`` ...), so ``workload.args`` may not set them again;
``WORKER_ARGS`` are the ones ``workload.args.<name>`` may set, with the kind of value each
takes.
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["flag", "positive_int", "positive_float", "int", "float", "str"]

#: Options the orchestrator passes from the scenario's fields (key: the scenario field).
ORCHESTRATOR: dict[str, str] = {
    "model": "workload.model", "dataset": "workload.dataset", "method": "methods",
    "steps": "workload.steps", "time-limit": "workload.time_limit_s",
    "batch-size": "workload.batch_size", "seed": "seeds", "log-dir": "(the run folder)",
    "threads": "workload.threads", "eval-every": "workload.eval_every",
    "target-accuracy": "workload.target_accuracy", "data-dir": "workload.data_dir",
    "lr": "workload.lr", "pg-timeout": "workload.pg_timeout_s",
    "backend": "workload.backend", "device": "workload.device",
    "convergence": "convergence", "grads": "workload.grads",
    "accelerator": "accelerator.profile", "step-ms": "accelerator.step_ms",
    "dilation": "accelerator.dilation",
}

#: Options ``workload.args`` may set, and the kind of value each takes.
WORKER_ARGS: dict[str, Kind] = {
    "eval-samples": "positive_int",
    "stop-at-target": "flag",
    "width": "positive_int",
    "layers": "positive_int",
    "d-model": "positive_int",
    "model-args": "str",
    "context": "positive_int",
    "no-error-feedback": "flag",
}

#: Largest integer a knob may take (a tensor dimension far above this cannot be allocated).
MAX_INT = 1 << 24


def option_name(key: str) -> str:
    """``workload.args`` key -> option name: ``d_model`` -> ``d-model``."""
    return key.replace("_", "-")


def check_arg(key: str, value: Any) -> None:
    """Raise ValueError (one line) unless ``--key value`` is an option the worker takes."""
    name = option_name(key)
    if name in ORCHESTRATOR:
        raise ValueError(f"{key!r} is set by {ORCHESTRATOR[name]}, not workload.args")
    kind = WORKER_ARGS.get(name)
    if kind is None:
        raise ValueError(f"unknown worker option {key!r}; accepted: "
                         f"{', '.join(k.replace('-', '_') for k in WORKER_ARGS)}")
    if kind == "flag":
        if not isinstance(value, bool):
            raise ValueError(f"{key!r} is a switch: true or false (got {value!r})")
        return
    if isinstance(value, bool):
        raise ValueError(f"{key!r} takes a value, not {value!r}")
    if kind in ("positive_int", "int"):
        if not isinstance(value, int):
            raise ValueError(f"{key!r} must be an integer (got {value!r})")
        if (kind == "positive_int" and value <= 0) or abs(value) > MAX_INT:
            low = 1 if kind == "positive_int" else -MAX_INT
            raise ValueError(f"{key!r} must be in [{low}, {MAX_INT}] (got {value!r})")
    elif kind in ("positive_float", "float"):
        if not isinstance(value, int | float) or value != value or value in (
                float("inf"), float("-inf")):
            raise ValueError(f"{key!r} must be a finite number (got {value!r})")
        if kind == "positive_float" and value <= 0:
            raise ValueError(f"{key!r} must be > 0 (got {value!r})")
    elif kind == "str":
        if not isinstance(value, str) or len(value) > 1000 or "\0" in value:
            raise ValueError(f"{key!r} must be a string of at most 1000 characters")
