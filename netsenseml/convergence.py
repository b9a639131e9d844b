"""The convergence prior: how many more steps each ladder level needs than plain training.

Why a table per job: time to accuracy is steps x seconds per step, and the policy can only
trade seconds for steps if it knows the exchange rate *of the job at hand*. The rate is a
property of the model, the data, the batch and the target, not of the network: a table
measured on one workload (say, a width-2048 MLP at 0.95 accuracy) says little about
another (width 512 at 0.85, where top-k at 0.1 costs nothing). So the table is measured for
the job (``netsense convergence SCENARIO`` runs the scenario's workload on loopback, every
level, several seeds) and handed to the policy (``hooks.register(..., convergence=PATH)``
or the scenario's ``convergence`` field).

The file (JSON, ``format: "netsense-convergence/1"``)::

    {"format": "netsense-convergence/1",
     "scenario": "eval-onoff",                 # where the workload came from (informative)
     "workload": {...},                        # model, dataset, batch, target, eval_every, ...
     "world_size": 2, "seeds": [0, 1, 2], "max_steps": 1500,
     "levels": {                               # keys: ladder levels, "topk:R" per ratio
       "none":      {"method": "allreduce", "steps": [220, 220, 240], "reached": 3, "runs": 3},
       "fp16":      {...}, "int8": {...},
       "topk:0.1":  {...}, "topk:0.01": {...}, "topk:0.001": {...}},
     "factors": {"none": 1.0, "fp16": 1.0, ...} # derived: mean steps / mean steps of "none"
    }

Only ``levels`` (each with ``steps``, one entry per seed, ``null`` where the run did not
reach the target within ``max_steps``) is read (a level it lacks takes the default's
factor, below); ``factors`` is written for people. A run
that did not reach the target counts as ``max_steps`` (a lower bound on what it needed: the
prior then understates that level's cost, and the ``reached`` count says so).

From the table, :class:`Prior` gives ``c(d)``: the dense levels' factors directly (at
least 1), and top-k's by piecewise-linear interpolation in ``log10(r)`` through the
measured ratios, made non-increasing in ``r`` (keeping more never costs more steps),
flat above the largest measured ratio (at most its cost) and extended below the smallest
with the steepest measured slope (what a harder compression costs is not measured there;
the steepest slope is the safe guess). ``resolution`` is the table's own uncertainty: one
evaluation interval relative to the base steps (a level that reaches the target one
evaluation later looks ``eval_every`` steps worse), or the seeds' spread where larger;
the policy does not chase J differences below it.

Without a table the policy uses :data:`DEFAULT_PRIOR`, a stated, conservative guess:
fp16 free (a rounding of 2^-11 relative, below SGD's noise), int8 10 % more steps, top-k
``1 + 0.5 x log10(0.25 / r)`` below 0.25 (c = 1.2 / 1.7 / 2.2 at r = 0.1 / 0.01 / 0.001),
above what the two measured MLP workloads of this repository show at every ratio, so an
uncalibrated job compresses only where the network clearly asks for it. Not learned
online: steps to accuracy are observed once per run, too late and too rarely to steer it.

Torch-free, so the testbed reads and checks a table without importing torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netsenseml import methods

FORMAT = "netsense-convergence/1"
#: Top-k ratios ``netsense convergence`` measures by default (a decade apart).
CALIBRATE_RATIOS: tuple[float, ...] = (0.1, 0.01, 0.001)


class ConvergenceError(ValueError):
    """A convergence table that cannot be used; ``str()`` is one line naming the field."""


def level_key(method: str) -> str:
    """Table key of a ladder method string (a table's row, where it enters):
    ``allreduce`` -> ``none``, ``topk:0.01`` stays (``MethodSpec.level_key``)."""
    key = methods.parse(method).level_key
    if key is None:
        raise ConvergenceError(f"{method!r} is not a ladder level; accepted: "
                               f"{', '.join(i.name for i in methods.ladder())}")
    return key


def level_method(key: str) -> methods.MethodSpec:
    """The method that measures the level ``key`` (``none`` -> ``allreduce``)."""
    try:
        return methods.level_spec(key)
    except ValueError as exc:
        raise ConvergenceError(f"levels: {exc}") from None


def calibrate_levels(half_level: str = "fp16") -> tuple[str, ...]:
    """The levels ``netsense convergence`` measures: the dense ladder and the default ratios."""
    dense = [i.label for i in methods.ladder() if i.arg is None and i.label != ("bf16" if half_level == "fp16" else "fp16")]
    ratio = [f"{i.label}:{r:g}" for i in methods.ladder() if i.arg == "ratio" for r in CALIBRATE_RATIOS]
    return (*dense, *ratio)


@dataclass(frozen=True)
class Prior:
    """``c(d)``, the factor on steps to accuracy per level (module docstring).

    ``dense``: factor per dense level (``none`` is 1); ``topk``: ``(ratio, factor)``
    points sorted by decreasing ratio (at least one); ``resolution``: relative
    uncertainty of the factors; ``source``: where they came from (logged).
    """

    dense: Mapping[str, float]
    topk: tuple[tuple[float, float], ...]
    resolution: float = 0.1
    source: str = "default"
    _slope: float = field(default=0.0, repr=False)  # per decade below the smallest ratio

    def __post_init__(self) -> None:
        if not self.topk:
            raise ConvergenceError("levels: need at least one topk:R level")
        pts = sorted(((float(r), max(1.0, float(c))) for r, c in self.topk), key=lambda p: -p[0])
        # Non-increasing in r: keeping more never costs more steps (a running max from the
        # largest ratio down).
        mono, worst = [], 1.0
        for r, c in pts:
            worst = max(worst, c)
            mono.append((r, worst))
        slopes = [(c2 - c1) / math.log10(r1 / r2) for (r1, c1), (r2, c2) in zip(mono, mono[1:], strict=False)]
        object.__setattr__(self, "topk", tuple(mono))
        object.__setattr__(self, "_slope", max([*slopes, 0.0]) if slopes else 0.5)
        object.__setattr__(self, "dense", {"none": 1.0, **{k: max(1.0, float(v)) for k, v in self.dense.items()}})

    def factor(self, level: str, ratio: float = 1.0) -> float:
        """``c(d)`` of a level (top-k at ``ratio``); an unknown dense level: KeyError."""
        if level != "topk":
            if level == "bf16" and "bf16" not in self.dense:
                level = "fp16"
            return self.dense[level]
        pts = self.topk
        if ratio >= pts[0][0]:
            return pts[0][1]
        for (r1, c1), (r2, c2) in zip(pts, pts[1:], strict=False):
            if r2 <= ratio <= r1:
                f = math.log10(r1 / ratio) / math.log10(r1 / r2)
                return c1 + f * (c2 - c1)
        r, c = pts[-1]
        return c + self._slope * math.log10(r / ratio)

    def summary(self) -> dict[str, Any]:
        """What the step logs and run summaries record about the prior in use."""
        return {"source": self.source, "resolution": self.resolution,
                **{k: round(v, 4) for k, v in self.dense.items()},
                **{f"topk:{r:g}": round(c, 4) for r, c in self.topk}}


def _default() -> Prior:
    ratios = (0.25, 0.1, 0.01, 0.001)
    return Prior({"fp16": 1.0, "bf16": 1.0, "int8": 1.1},
                 tuple((r, 1.0 + 0.5 * math.log10(0.25 / r)) for r in ratios),
                 resolution=0.1, source="default (conservative, uncalibrated)")


#: The prior of a job without a calibrated table (module docstring).
DEFAULT_PRIOR = _default()


def from_steps(table: Mapping[str, float], source: str = "table",
               resolution: float = 0.1) -> Prior:
    """A prior from ``{level or method: mean steps}`` (``none``/``allreduce`` required)."""
    steps = {}
    for key, v in table.items():
        try:
            k = level_key(key) if key != "none" else "none"
        except ValueError as exc:
            raise ConvergenceError(f"levels.{key}: {exc}") from None
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise ConvergenceError(f"levels.{key}: steps must be a positive number, got {v!r}")
        steps[k] = float(v)
    if "none" not in steps:
        raise ConvergenceError("levels: need the uncompressed level 'none' (allreduce) as the base")
    base = steps["none"]
    # Dense levels the table lacks take the default's factor (stated, conservative).
    dense = {**{k: v for k, v in DEFAULT_PRIOR.dense.items() if k != "none"},
             **{k: v / base for k, v in steps.items() if ":" not in k}}
    topk = tuple((r, v / base) for k, v in steps.items() if ":" in k
                 for label, r in [methods.split_level(k)] if label == "topk")
    return Prior(dense, topk or DEFAULT_PRIOR.topk, resolution=resolution, source=source)


def from_table(data: Mapping[str, Any], source: str = "table") -> Prior:
    """A prior from a parsed convergence file (module docstring); ConvergenceError if bad."""
    if not isinstance(data, Mapping):
        raise ConvergenceError("the table must be a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise ConvergenceError(f"format: {fmt!r} is not {FORMAT!r}")
    levels = data.get("levels")
    if not isinstance(levels, Mapping) or not levels:
        raise ConvergenceError("levels: need an object of level -> {steps: [...]}")
    cap = data.get("max_steps")
    means, spreads, eval_every = {}, [], data.get("workload", {}).get("eval_every") if isinstance(
        data.get("workload"), Mapping) else None
    for key, row in levels.items():
        if not isinstance(row, Mapping) or not isinstance(row.get("steps"), list) or not row["steps"]:
            raise ConvergenceError(f"levels.{key}.steps: need a non-empty list (null: not reached)")
        vals = []
        for v in row["steps"]:
            if v is None:
                if not isinstance(cap, int | float) or cap <= 0:
                    raise ConvergenceError(f"levels.{key}.steps: null needs max_steps > 0")
                v = cap
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ConvergenceError(f"levels.{key}.steps: {v!r} is not a positive number")
            vals.append(float(v))
        means[key] = sum(vals) / len(vals)
        if len(vals) > 1:
            m = means[key]
            sd = math.sqrt(sum((x - m) ** 2 for x in vals) / (len(vals) - 1))
            spreads.append(sd / math.sqrt(len(vals)) / m)
    base = means.get("none", means.get("allreduce"))
    res = 0.05
    if base and isinstance(eval_every, int | float) and eval_every > 0:
        res = max(res, float(eval_every) / base)
    if spreads:
        res = max(res, max(spreads))
    return from_steps(means, source=source, resolution=res)


def load(value: str | Path | Mapping[str, Any] | Prior | None) -> Prior:
    """The prior for ``hooks.register(convergence=...)``: a path, a parsed table, a
    ``{level: steps}`` mapping, a :class:`Prior`, or None (:data:`DEFAULT_PRIOR`)."""
    if value is None:
        return DEFAULT_PRIOR
    if isinstance(value, Prior):
        return value
    if isinstance(value, Mapping):
        if "levels" in value:
            return from_table(value, source="table")
        return from_steps(value, source="table")
    path = Path(value).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConvergenceError(f"convergence: cannot read {str(path)!r} ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConvergenceError(f"convergence: {path.name} is not JSON (line {exc.lineno}: {exc.msg})") from None
    try:
        return from_table(data, source=str(path))
    except ConvergenceError as exc:
        raise ConvergenceError(f"convergence {path.name}: {exc}") from None


def check_file(path: str | Path) -> Path:
    """Validates a table file for the scenario schema; returns its resolved path."""
    load(path)
    return Path(path).expanduser().resolve()
