"""Scenario files: the pydantic schema, loading by name or path, and overrides.

A scenario says everything one experiment needs: which topology to build and how big,
the link rates (Mbit/s) and queue sizes (the topology's own ``Params`` model, found
through ``topologies.registry``), the training workload, the methods and seeds to
compare, and a timeline of network events. All validation happens here, *before* anything
is built, so that a typo costs an error line and never a half-built network: unknown
fields are refused (``extra="forbid"``), methods go through ``netsenseml.methods.parse``,
links and hosts named by events are checked against the names the topology *will* have
(computed from the config, no Mininet involved), trace files must exist and parse, and the
netem fields (delay, jitter, loss) are refused when the running kernel has no sch_netem.

Overrides (used by sweeps and ``netsense run --set``) address fields by dotted path and
re-validate the whole scenario. Paths (``N`` is a list index)::

    name, description, timeline_origin, probe_links, probe_seconds, timeout_s
    topology.kind     a name in topologies.registry (star | dumbbell | leafspine), or
                      package.module:Class for a user's topology (topologies/PLUGINS.md)
    topology.<field>  the kind's own fields, from its Params model, e.g.
                      topology.n_workers, topology.rate_mbit (star),
                      topology.bottleneck_mbit (dumbbell), topology.uplink_mbit (leafspine),
                      topology.queue_pkts, topology.delay_ms, topology.jitter_ms,
                      topology.loss_pct (every built-in)
    workload.model (a name in workloads.registry, or package.module:factory for a user's
    model importable by the workers), workload.dataset (a name in workloads.registry),
    workload.batch_size, workload.steps,
    workload.time_limit_s, workload.eval_every, workload.target_accuracy, workload.lr,
    workload.threads, workload.data_dir, workload.args.<knob>   (e.g. workload.args.width)
    methods, methods.N, seeds, seeds.N
    timeline.N.at, timeline.N.<field>   e.g. timeline.0.max_streams, timeline.1.mbit
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from netsenseml import methods
from testbed.common import inputs, schema
from testbed.common.names import is_name
from testbed.common.schema import StrictModel
from testbed.config.events import EVENT_KINDS, Event, Names
from topologies import registry as topology_registry
from topologies.spec import TopologyParams
from workloads import registry

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


class ScenarioError(ValueError):
    """A scenario that cannot be run; ``str()`` is the one line shown to the user."""


# --------------------------------------------------------------------------- topology


def _topology(value: Any) -> TopologyParams:
    """The kind's own Params model (registry or plug-in import path), validated."""
    return topology_registry.parse(value)


# The registered kinds and plug-ins (``topologies.registry``); errors are located at the
# topology's fields. SerializeAsAny: dumps keep the kind's own fields, not just ``kind``.
Topology = SerializeAsAny[Annotated[TopologyParams, BeforeValidator(_topology),
                                    WithJsonSchema(topology_registry.json_schema())]]


def n_workers(topo: TopologyParams) -> int:
    """World size of the training job the topology hosts."""
    return len(topo.worker_hosts())


def host_names(topo: TopologyParams) -> list[str]:
    """Worker hosts w0..w(N-1) then cross hosts x0..; same names the emulation builds."""
    return topo.hosts()


def link_names(topo: TopologyParams) -> list[str]:
    """Logical names of the links events may target, computed from the config without
    building; ``run.py`` checks them against ``Emulation.links()`` after the build."""
    return topo.link_names()


def build_params(topo: TopologyParams) -> dict[str, Any]:
    """The Topo.build keyword arguments for the emulation layer (impairments 0 -> None)."""
    return topo.build_params()


# --------------------------------------------------------------------------- workload


class Workload(StrictModel):
    """The training job: ``python -m workloads.train`` arguments."""

    model: str = "mlp"  # a name in workloads.registry or package.module:factory
    dataset: str = "digits"  # a name in workloads.registry
    batch_size: int = Field(32, gt=0, le=65536)
    steps: int | None = Field(None, gt=0)
    time_limit_s: float | None = Field(None, gt=0)
    eval_every: int | None = Field(None, gt=0)
    target_accuracy: float | None = Field(None, gt=0, le=1)
    lr: float | None = Field(None, gt=0)
    threads: int = Field(1, gt=0, le=64)
    data_dir: str | None = None
    pg_timeout_s: float | None = Field(None, gt=0)
    args: dict[str, int | float | str | bool] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str) -> str:
        registry.check_model_name(v)  # torch-free; a plug-in's module must be findable
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset_known(cls, v: str) -> str:
        registry.dataset_entry(v)
        return v

    @model_validator(mode="after")
    def _one_length(self) -> Workload:
        if (self.steps is None) == (self.time_limit_s is None):
            raise ValueError("give exactly one of steps or time_limit_s")
        if not registry.is_plugin(self.model):
            entry = registry.model_entry(self.model)
            if not registry.fits(entry, registry.dataset_entry(self.dataset)):
                raise ValueError(f"dataset {self.dataset!r} does not fit model {self.model!r}; "
                                 f"accepted: {', '.join(registry.datasets_for(entry))}")
        return self

    @field_validator("args")
    @classmethod
    def _knob_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.fullmatch(r"[a-z][a-z0-9_-]*", key):
                raise ValueError(f"bad knob name {key!r} (lowercase letters, digits, _ and -)")
        return v


# --------------------------------------------------------------------------- scenario


def _method_ok(spec: str) -> str:
    check_method(spec)
    return spec


# Per item, so an error is located as methods[i].
MethodSpec = Annotated[str, AfterValidator(_method_ok)]


class Scenario(StrictModel):
    """One experiment: a network, a workload, methods x seeds, and a timeline."""

    name: str
    description: str = ""
    topology: Topology
    workload: Workload
    methods: list[MethodSpec] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    timeline: list[Event] = Field(default_factory=list)
    timeline_origin: Literal["launch", "first_step"] = Field(
        "launch",
        description="launch: event times count from the workers' start; first_step: from "
        "rank 0's first step record (steadier when start-up time varies)",
    )
    probe_links: bool = False
    probe_seconds: float = Field(2.0, gt=0, le=60)
    timeout_s: float | None = Field(None, gt=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_name(v):
            raise ValueError(
                f"invalid name {v!r}: letters, digits, '.', '_' and '-' only "
                "(no path separators)"
            )
        return v

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("duplicate methods")
        return v

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Scenario:
        topo = self.topology
        names = Names(topo.link_names(), topo.hosts())
        for i, ev in enumerate(self.timeline):  # in file order: a stop needs its start
            try:
                ev.check(names)
            except ValueError as exc:
                raise ValueError(f"timeline[{i}] ({ev.kind}): {exc}") from None
        impaired = topo.impairments()
        if impaired and not (info.context or {}).get("skip_kernel_checks"):
            from testbed.emulation import kernel

            if not kernel.has_netem():
                raise ValueError(f"topology.{impaired[0]}: {kernel.NETEM_MISSING_MSG}")
        return self

    # convenience -----------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return n_workers(self.topology)

    def deadline_s(self) -> float:
        """Whole-run limit the orchestrator enforces (launch to last worker exit).

        Default: time limit x 1.5 + 120 s, or 600 s for step-counted runs; generous on
        purpose, since a loaded 2-core machine can take tens of seconds to import torch.
        """
        if self.timeout_s is not None:
            return self.timeout_s
        if self.workload.time_limit_s is not None:
            return self.workload.time_limit_s * 1.5 + 120.0
        return 600.0


def check_method(spec: str) -> None:
    """Raise ValueError naming the spec and the accepted forms if it is not a method.

    Grammar only (``netsenseml.methods``, no torch): a plug-in ``pkg.mod:Name`` is imported
    by the workers, which exit with one line when it cannot be.
    """
    methods.parse(spec)


# --------------------------------------------------------------------------- loading


def scenario_path(name_or_path: str | Path) -> Path:
    """A scenario file path: an existing path as given, else testbed/scenarios/<name>.yaml."""
    return inputs.resolve(name_or_path, SCENARIO_DIR, "scenario", ScenarioError)


def format_validation_error(exc: ValidationError) -> str:
    """First error of a pydantic ValidationError as ``path: message (got X)``."""
    return schema.one_line(exc, tags=EVENT_KINDS)


def validate_scenario(
    data: Mapping[str, Any], *, base_dir: Path | None = None, skip_kernel_checks: bool = False
) -> Scenario:
    """Validate a mapping; raise ScenarioError with a one-line message."""
    try:
        return Scenario.model_validate(
            dict(data),
            context={"base_dir": base_dir, "skip_kernel_checks": skip_kernel_checks},
        )
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc)) from None


def load_scenario(name_or_path: str | Path, *, skip_kernel_checks: bool = False) -> Scenario:
    """Load and validate a scenario by name (testbed/scenarios/NAME.yaml) or by path.

    Raises ScenarioError whose message starts with ``scenario <file>:``.
    """
    path = scenario_path(name_or_path)
    label = path.name
    data = inputs.load_mapping(path, f"scenario {label}", ScenarioError)
    try:
        scn = validate_scenario(
            data, base_dir=path.resolve().parent, skip_kernel_checks=skip_kernel_checks
        )
    except ScenarioError as exc:
        raise ScenarioError(f"scenario {label}: {exc}") from None
    return scn


def _set_dotted(data: Any, parts: list[str], value: Any, full: str) -> None:
    key = parts[0]
    if isinstance(data, list):
        try:
            idx = int(key)
            data[idx]  # noqa: B018 - index check
        except (ValueError, IndexError):
            raise ScenarioError(f"override {full!r}: no list index {key!r}") from None
        if len(parts) == 1:
            data[idx] = value
        else:
            _set_dotted(data[idx], parts[1:], value, full)
        return
    if not isinstance(data, dict):
        raise ScenarioError(f"override {full!r}: {key!r} is not inside a mapping")
    if len(parts) == 1:
        data[key] = value
        return
    if key not in data:
        if key == "args":
            data[key] = {}
        else:
            raise ScenarioError(f"override {full!r}: no field {key!r}")
    _set_dotted(data[key], parts[1:], value, full)


def apply_overrides(scenario: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """A new Scenario with ``{"dotted.path": value}`` applied and everything re-validated.

    Unknown leaf fields are caught by validation (extra="forbid"). Trace paths are
    already absolute after the first load, so re-validation finds them.
    """
    data = copy.deepcopy(scenario.model_dump(mode="python"))
    for dotted, value in overrides.items():
        parts = [p for p in re.split(r"\.|\[(\d+)\]", dotted) if p]
        if not parts:
            raise ScenarioError(f"override {dotted!r}: empty path")
        _set_dotted(data, parts, value, dotted)
    # Drop fields left at None so a switch from steps to time_limit_s stays valid.
    wl = data.get("workload", {})
    if "time_limit_s" in _touched(overrides, "workload") and wl.get("time_limit_s"):
        if "workload.steps" not in overrides:
            wl["steps"] = None
    if "steps" in _touched(overrides, "workload") and wl.get("steps"):
        if "workload.time_limit_s" not in overrides:
            wl["time_limit_s"] = None
    try:
        return validate_scenario(data)
    except ScenarioError as exc:
        raise ScenarioError(f"scenario {scenario.name} with overrides: {exc}") from None


def _touched(overrides: Mapping[str, Any], section: str) -> set[str]:
    return {k.split(".", 1)[1] for k in overrides if k.startswith(section + ".") and "." in k}


def list_scenarios() -> list[tuple[str, str]]:
    """(name, one-line description) of each bundled scenario, sorted by name.

    A broken bundled file is listed with its error instead of aborting the listing.
    """
    out = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text()) or {}
            desc = str(data.get("description", "")).strip().splitlines()
            out.append((path.stem, desc[0] if desc else ""))
        except (yaml.YAMLError, OSError, AttributeError) as exc:
            out.append((path.stem, f"(unreadable: {type(exc).__name__})"))
    return out
