"""Sweeps: the cartesian product of scenario parameters x methods x seeds, run one by one.

Why a sweep is its own file format (testbed/sweeps/*.yaml) rather than a loop in a script:
the paper's results are *shapes* (throughput vs rate, time to accuracy at a constrained rate,
adaptation under a congestion ramp), each needing a different base scenario and grid. A sweep
file names those experiments once, the expansion is deterministic, and every run gets a
deterministic folder

    <results>/<sweep name>/<experiment>/<param slug, e.g. rate_mbit=50>/<method slug>-s<seed>/

so an interrupted sweep resumes: a run whose ``summary.json`` says ``"status": "ok"`` is
skipped, anything else (missing, failed, half-written) is run again. A failed run is recorded
by the orchestrator (``status: failed`` + reason) and the sweep goes on; Ctrl-C stops the sweep
after the current run's teardown (``run_scenario`` re-raises KeyboardInterrupt once clean).

Beside the orchestrator's files each run folder gets ``sweep.json`` (sweep name, experiment,
its ``kind`` and the grid values). The tables use it to know which runs belong to which figure
without guessing from paths.

Schema (pydantic, extra="forbid"; top-level ``methods``/``seeds``/``overrides``/``target``
are defaults that each experiment may replace)::

    name: paper-quick
    description: ...
    methods: [allreduce, netsenseml]
    seeds: [0]
    overrides: {"dotted.path": value}        # applied to every experiment
    experiments:
      - name: rate
        kind: throughput                    # throughput | tta | timeline | other
        scenario: star-mlp                  # scenario name, path, or an inline mapping
        grid: {"links.bottleneck.rate_mbit": [10, 50, 200]}
        overrides: {...}
        methods: [...]                      # optional, replaces the top-level list
        seeds: [...]

A single-experiment sweep may instead give ``scenario`` / ``grid`` / ``kind`` at top level.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    model_validator,
)

from netsenseml import methods
from testbed.common import inputs, schema
from testbed.common.names import is_name, slug
from testbed.common.schema import StrictModel

# The run-time estimate (its constants and basis), re-exported for the CLI and the sweep.
from testbed.config.estimate import (  # noqa: F401
    FALLBACK_STEP_S,
    PER_RUN_OVERHEAD_S,
    estimate,
    estimate_run_s,
)

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"

Kind = Literal["throughput", "tta", "timeline", "other"]

#: Most runs one sweep may expand to (a grid typo like range(10**6) must not hang).
MAX_RUNS = 10_000
#: Longest file name (NAME_MAX): each folder level of a run must fit.
NAME_MAX = 255


class SweepError(ValueError):
    """Bad sweep input; the message is one line naming the field (the CLI exits 2 with it)."""


def _check_methods(v: list[str]) -> list[str]:
    if not v:
        raise ValueError("must list at least one method")
    for m in v:
        methods.parse(m)  # its ValueError names the spec and the accepted forms
    if len(set(v)) != len(v):
        raise ValueError("methods repeat")
    return v


def _check_seeds(v: list[int]) -> list[int]:
    if not v:
        raise ValueError("must list at least one seed")
    if any(not 0 <= s <= 2**32 - 1 for s in v) or len(set(v)) != len(v):
        raise ValueError("seeds must be distinct integers in [0, 4294967295]")
    return v


def _check_grid(v: dict[str, list[Any]]) -> dict[str, list[Any]]:
    keys = set()
    for path, values in v.items():
        if not path or any(not part for part in path.split(".")):
            raise ValueError(f"grid key {path!r} must be a dotted path like 'links.rate_mbit'")
        if not isinstance(values, list) or not values:
            raise ValueError(f"grid[{path!r}] must be a non-empty list of values")
        key = path.rsplit(".", 1)[-1]
        if key in keys:
            raise ValueError(f"two grid paths end in {key!r}; folder slugs would clash")
        keys.add(key)
    return v


Methods = Annotated[list[str], AfterValidator(_check_methods)]
Seeds = Annotated[list[int], AfterValidator(_check_seeds)]
Grid = Annotated[dict[str, list[Any]], AfterValidator(_check_grid)]


def _check_name(v: str) -> str:
    if len(v) > 128:
        raise ValueError("at most 128 characters (it names a folder)")
    if not is_name(v):
        raise ValueError("must be letters, digits, '_', '-', '.' (it names a folder)")
    return v


Name = Annotated[str, AfterValidator(_check_name)]


class ExperimentSpec(StrictModel):
    """One base scenario, a grid over some of its fields, and the methods/seeds to run."""

    name: Name
    """Experiment name: a folder under the sweep's."""
    kind: Kind = "other"
    """What the experiment measures, for the figures: throughput, tta, timeline or other. Default other."""
    scenario: str | dict[str, Any]
    """The base scenario: a name, a path, or the scenario inline."""
    grid: Grid = Field(default_factory=dict)
    """Scenario fields (dotted paths) to sweep, each with its list of values: every combination is run."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Scenario fields (dotted paths) set for every run of this experiment."""
    methods: Methods | None = None
    """Methods of this experiment (default: the sweep's, else the scenario's)."""
    seeds: Seeds | None = None
    """Seeds of this experiment (default: the sweep's)."""
    compare_as: Name | None = None
    """Another experiment of this sweep whose tables and figures these runs join (its folder stays its own): e.g. adaptive methods run longer beside the fixed ones of the same grid. Default: none."""


class SweepSpec(StrictModel):
    """A whole sweep file; see the module docstring for the layout."""

    name: Name
    """Sweep name: the results folder's name."""
    description: str = ""
    """One line shown by `netsense list`."""
    methods: Methods | None = None
    """Methods of every experiment (default: each scenario's)."""
    seeds: Seeds = Field(default_factory=lambda: [0])
    """Seeds of every experiment. Default [0]."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Scenario fields (dotted paths) set for every run of the sweep."""
    # single-experiment shorthand
    scenario: str | dict[str, Any] | None = None
    """Single-experiment shorthand: the base scenario (name, path or inline)."""
    kind: Kind = "other"
    """Single-experiment shorthand: the experiment's kind (throughput, tta, timeline, other)."""
    grid: Grid = Field(default_factory=dict)
    """Single-experiment shorthand: fields to sweep, each with its values."""
    experiments: list[ExperimentSpec] = Field(default_factory=list)
    """The experiments, each a base scenario, a grid and its methods/seeds."""

    @model_validator(mode="after")
    def _one_form(self) -> SweepSpec:
        if self.scenario and self.experiments:
            raise ValueError("give either 'scenario' (one experiment) or 'experiments', not both")
        if not self.scenario and not self.experiments:
            raise ValueError("give 'scenario' or a non-empty 'experiments' list")
        if self.scenario:
            self.experiments = [
                ExperimentSpec(name="main", kind=self.kind, scenario=self.scenario, grid=self.grid)
            ]
        names = [e.name for e in self.experiments]
        if len(set(names)) != len(names):
            raise ValueError(f"experiments: names repeat ({names})")
        for e in self.experiments:
            if e.compare_as is not None and (e.compare_as == e.name or e.compare_as not in names):
                raise ValueError(f"experiments.{e.name}.compare_as: {e.compare_as!r} names no "
                                 f"other experiment; experiments: {', '.join(names)}")
            if (e.methods or self.methods) is None:
                raise ValueError(f"experiments.{e.name}.methods: none given and no top-level methods")
        return self


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One run of a sweep: everything needed to build its scenario and find its folder."""

    sweep: str
    experiment: str
    kind: str
    scenario_ref: str | dict[str, Any]
    params: dict[str, Any]  # grid values keyed by the last segment of the dotted path
    overrides: dict[str, Any]  # every dotted override (fixed + grid) for apply_overrides
    method: str
    seed: int
    run_dir: Path
    scenario: Any = field(default=None, compare=False, hash=False)  # resolved Scenario
    compare_as: str | None = None  # the experiment the analysis files it under (else its own)

    @property
    def label(self) -> str:
        p = " ".join(f"{k}={fmt_value(v)}" for k, v in self.params.items())
        return f"{self.experiment} {p} {self.method} s{self.seed}".replace("  ", " ")


def fmt_value(v: Any) -> str:
    """A grid value as labels and folder names write it (1000.0 -> "1000")."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def param_slug(params: dict[str, Any]) -> str:
    if not params:
        return "base"
    return ",".join(f"{slug(k)}={slug(fmt_value(v))}" for k, v in params.items())


def method_slug(method: str, seed: int) -> str:
    return f"{slug(method)}-s{seed}"


def resolve_sweep_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A path to an existing file, or a name in testbed/sweeps/ ('paper-quick')."""
    return inputs.resolve(name_or_path, SWEEPS_DIR, "sweep", SweepError)


def list_sweeps() -> list[tuple[str, str]]:
    """(name, one-line description) of each bundled sweep, with its run count when it loads."""
    out = []
    for path in sorted(SWEEPS_DIR.glob("*.yaml")):
        try:
            spec = load_sweep(path)
            n = len(expand(spec, Path("results")))
            desc = (spec.description.strip().splitlines() or [""])[0]
            out.append((path.stem, f"{desc} [{n} runs]" if desc else f"[{n} runs]"))
        except SweepError as exc:
            out.append((path.stem, f"(invalid: {exc})"))
    return out


def _one_line(err: ValidationError, source: str) -> str:
    """``source: path: message``, with a "did you mean" for an unknown field."""
    e = err.errors()[0]
    msg = schema.one_line(err)
    if e["type"] == "extra_forbidden":
        from testbed.config.renames import suggest

        msg += suggest(SweepSpec, tuple(e["loc"]))
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: {msg}{more}"


def load_sweep(name_or_path: str | os.PathLike[str]) -> SweepSpec:
    path = resolve_sweep_path(name_or_path)
    data = inputs.load_mapping(path, f"sweep {path.name}", SweepError)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        raise SweepError(_one_line(err, f"sweep {path.name}")) from None


def expand(spec: SweepSpec, results_root: Path) -> list[RunSpec]:
    """Every run of the sweep, in a stable order: experiment, grid point, method, seed.

    SweepError when two runs would share a folder (grid values with one slug: 20 and
    20.0, "a" and "a "), when a folder name would exceed NAME_MAX, or past MAX_RUNS runs.
    """
    runs: list[RunSpec] = []
    total = 0
    for exp in spec.experiments:
        n = len(exp.methods or spec.methods or []) * len(exp.seeds or spec.seeds)
        for values in exp.grid.values():
            n *= len(values)
        total += n
    if total > MAX_RUNS:
        raise SweepError(f"sweep {spec.name}: {total} runs, more than the {MAX_RUNS} accepted")
    seen: dict[Path, str] = {}
    for exp in spec.experiments:
        methods = exp.methods or spec.methods or []
        seeds = exp.seeds or spec.seeds
        paths = list(exp.grid)
        for values in itertools.product(*(exp.grid[p] for p in paths)):
            grid_over = dict(zip(paths, values, strict=True))
            params = {p.rsplit(".", 1)[-1]: v for p, v in grid_over.items()}
            over = {**spec.overrides, **exp.overrides, **grid_over}
            for method in methods:
                for seed in seeds:
                    run_dir = (
                        results_root / spec.name / exp.name / param_slug(params)
                        / method_slug(method, seed)
                    )
                    run = RunSpec(spec.name, exp.name, exp.kind, exp.scenario, params, over,
                                  method, seed, run_dir, compare_as=exp.compare_as)
                    _check_folder(run, results_root, seen)
                    runs.append(run)
    return runs


def _check_folder(run: RunSpec, results_root: Path, seen: dict[Path, str]) -> None:
    where = f"experiments.{run.experiment}"
    for part in run.run_dir.relative_to(results_root).parts:
        if len(part.encode()) > NAME_MAX:
            raise SweepError(f"{where}: folder name {part[:40]!r}... is longer than "
                             f"{NAME_MAX} bytes; shorten the grid values or method")
    grid = ", ".join(f"{k}={v!r}" for k, v in run.params.items()) or "(no grid)"
    if run.run_dir in seen:
        raise SweepError(f"{where}.grid: {grid} and {seen[run.run_dir]} map to the same run "
                         f"folder {run.run_dir.parent.name!r} ({run.method} s{run.seed}); "
                         "give distinct values")
    seen[run.run_dir] = grid


def resolve_scenarios(runs: list[RunSpec], base_dir: Path | None = None) -> list[RunSpec]:
    """Load and override every run's scenario up front, so bad input fails before any run.

    ``base_dir`` resolves relative paths (trace files) of inline scenarios: the sweep file's
    folder.
    The orchestrator's validation errors are re-raised as one-line SweepErrors naming the run.
    """
    from testbed.config import scenario as scn  # the orchestrator's module

    cache: dict[str, Any] = {}
    resolved_cache: dict[tuple[str, str], Any] = {}
    out = []
    for r in runs:
        ref = r.scenario_ref
        key = ref if isinstance(ref, str) else json.dumps(ref, sort_keys=True, default=str)
        label = ref if isinstance(ref, str) else "inline scenario"
        try:
            if key not in cache:
                cache[key] = (scn.load_scenario(_near(ref, base_dir)) if isinstance(ref, str)
                              else scn.validate_scenario(ref, base_dir=base_dir,
                                                    label=f"experiment {r.experiment}"))
            okey = (key, json.dumps(r.overrides, sort_keys=True, default=str))
            if okey not in resolved_cache:  # methods x seeds share one resolved scenario
                resolved_cache[okey] = scn.apply_overrides(cache[key], r.overrides)
            resolved = resolved_cache[okey]
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001 - any validation error becomes one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SweepError(f"experiment {r.experiment!r} ({label}): {first}") from None
        out.append(_with_scenario(r, resolved))
    return out


def _near(ref: str, base_dir: Path | None) -> str:
    """A relative scenario *path* in a sweep file means: next to the sweep file (if there)."""
    p = Path(ref)
    if base_dir is not None and not p.is_absolute() and ("/" in ref or p.suffix in (".yaml", ".yml")):
        cand = base_dir / p
        if cand.is_file():
            return str(cand)
    return ref


def _with_scenario(r: RunSpec, scenario: Any) -> RunSpec:
    return dataclasses.replace(r, scenario=scenario)  # every other field kept (compare_as)


def with_overrides(runs: list[RunSpec], overrides: dict[str, Any]) -> list[RunSpec]:
    """Runs with ``overrides`` (``netsense sweep --set``) applied last, so they win."""
    if not overrides:
        return runs
    return [dataclasses.replace(r, overrides={**r.overrides, **overrides}) for r in runs]


def experiment_summary(runs: list[RunSpec], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per experiment for ``sweep --dry-run``: runs, pending, grid, estimate."""
    out: dict[str, dict[str, Any]] = {}
    for r, row in zip(runs, rows, strict=True):
        e = out.setdefault(r.experiment, {
            "experiment": r.experiment, "kind": r.kind, "runs": 0, "pending": 0,
            "grid": {}, "methods": set(), "seeds": set(), "est_s": 0.0})
        e["runs"] += 1
        e["pending"] += row["state"] == "pending"
        e["est_s"] += row["est_s"]
        e["methods"].add(r.method)
        e["seeds"].add(r.seed)
        for k, v in r.params.items():
            e["grid"].setdefault(k, [])
            if v not in e["grid"][k]:
                e["grid"][k].append(v)
    for e in out.values():
        e["grid"] = "; ".join(f"{k}: {', '.join(fmt_value(v) for v in vs)}"
                              for k, vs in e["grid"].items()) or "-"
        e["methods"], e["seeds"] = len(e["methods"]), len(e["seeds"])
    return list(out.values())
