"""Scenario files: the pydantic schema, loading by name or path, and overrides.

A scenario says everything one experiment needs: which topology to build and how big,
the link rates (Mbit/s) and queue sizes, the training workload, the methods and seeds to
compare, and a timeline of network events. All validation happens here, *before* anything
is built, so that a typo costs an error line and never a half-built network: unknown
fields are refused (``extra="forbid"``), methods go through ``netsenseml.methods.parse``,
links and hosts named by events are checked against the names the topology *will* have
(computed from the config, no Mininet involved), trace files must exist and parse, and the
netem fields (delay, jitter, loss) are refused when the running kernel has no sch_netem.

Overrides (used by sweeps and ``netsense run --set``) address fields by dotted path and
re-validate the whole scenario. Paths (``N`` is a list index)::

    name, description, timeline_origin, probe_links, probe_seconds, timeout_s, capture
    topology.kind                       star | dumbbell | leafspine
    topology.n_workers, topology.n_cross, topology.rate_mbit            (star)
    topology.n_left, topology.n_right, topology.n_cross,
    topology.bottleneck_mbit, topology.access_mbit                      (dumbbell)
    topology.leaves, topology.spines, topology.hosts_per_leaf,
    topology.access_mbit, topology.uplink_mbit                          (leafspine)
    topology.queue_pkts, topology.delay_ms, topology.jitter_ms, topology.loss_pct
    workload.model (a name in workloads.registry, or package.module:factory for a user's
    model importable by the workers), workload.dataset (a name in workloads.registry),
    workload.batch_size, workload.steps,
    workload.time_limit_s, workload.eval_every, workload.target_accuracy, workload.lr,
    workload.threads, workload.data_dir, workload.args.<knob>   (e.g. workload.args.width)
    workload.backend (auto | gloo | nccl), workload.device (auto | cpu | cuda)
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
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from netsenseml import methods
from workloads import registry

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NETEM_FIELDS = ("delay_ms", "jitter_ms", "loss_pct")


class ScenarioError(ValueError):
    """A scenario that cannot be run; ``str()`` is the one line shown to the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


# --------------------------------------------------------------------------- topology


class _LinkFields(_Strict):
    """Fields every topology shares: queue size and the netem-only impairments."""

    queue_pkts: int = Field(100, gt=0, le=100000)
    delay_ms: float = Field(0.0, ge=0)
    jitter_ms: float = Field(0.0, ge=0)
    loss_pct: float = Field(0.0, ge=0, le=100)


class StarTopology(_LinkFields):
    """n workers and n_cross cross-traffic hosts on one switch; every access link shaped."""

    kind: Literal["star"]
    n_workers: int = Field(gt=0, le=64)
    n_cross: int = Field(1, ge=0, le=16)
    rate_mbit: float = Field(gt=0, le=100000)


class DumbbellTopology(_LinkFields):
    """Workers split over two switches joined by one shaped bottleneck."""

    kind: Literal["dumbbell"]
    n_left: int = Field(gt=0, le=32)
    n_right: int = Field(gt=0, le=32)
    n_cross: int = Field(2, ge=0, le=16)
    bottleneck_mbit: float = Field(gt=0, le=100000)
    access_mbit: float = Field(1000.0, gt=0, le=100000)


class LeafSpineTopology(_LinkFields):
    """Two-tier Clos: hosts under leaves, every leaf wired to every spine."""

    kind: Literal["leafspine"]
    leaves: int = Field(2, gt=0, le=16)
    spines: int = Field(2, gt=0, le=16)
    hosts_per_leaf: int = Field(2, gt=0, le=16)
    access_mbit: float = Field(1000.0, gt=0, le=100000)
    uplink_mbit: float = Field(100.0, gt=0, le=100000)


Topology = Annotated[
    StarTopology | DumbbellTopology | LeafSpineTopology, Field(discriminator="kind")
]


def n_workers(topo: StarTopology | DumbbellTopology | LeafSpineTopology) -> int:
    """World size of the training job the topology hosts."""
    if isinstance(topo, StarTopology):
        return topo.n_workers
    if isinstance(topo, DumbbellTopology):
        return topo.n_left + topo.n_right
    return topo.leaves * topo.hosts_per_leaf


def host_names(topo: StarTopology | DumbbellTopology | LeafSpineTopology) -> list[str]:
    """Worker hosts w0..w(N-1) then cross hosts x0..; same names the emulation builds."""
    n_cross = getattr(topo, "n_cross", 0)  # leaf-spine has none: workers cross-talk
    return [f"w{i}" for i in range(n_workers(topo))] + [f"x{i}" for i in range(n_cross)]


def link_names(topo: StarTopology | DumbbellTopology | LeafSpineTopology) -> list[str]:
    """Logical names of the shaped links, computed from the config without building.

    Access links are named after their host; the dumbbell adds ``bottleneck``; a
    leaf-spine adds ``l<i>-p<j>`` uplinks. ``run.py`` checks this against
    ``Emulation.links()`` after the build so the two can never silently diverge.
    """
    names = host_names(topo)
    if isinstance(topo, DumbbellTopology):
        names = ["bottleneck", *names]
    elif isinstance(topo, LeafSpineTopology):
        names = [f"l{i}-p{j}" for i in range(topo.leaves) for j in range(topo.spines)] + names
    return names


def build_params(topo: StarTopology | DumbbellTopology | LeafSpineTopology) -> dict[str, Any]:
    """The Topo.build keyword arguments for the emulation layer.

    Impairments left at 0 become None: the topologies add a netem qdisc for any value
    that is not None, and this kernel may have no netem at all.
    """
    params = topo.model_dump(exclude={"kind"})
    for key in NETEM_FIELDS:
        if not params.get(key):
            params[key] = None
    return params


# --------------------------------------------------------------------------- workload


class Workload(_Strict):
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
    # auto: in the emulation, CUDA + NCCL when every worker can have a GPU of its own, else
    # CPU + gloo (testbed.orchestration.gpus); the worker's --backend/--device.
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
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


# --------------------------------------------------------------------------- events


class _Event(_Strict):
    at: float = Field(ge=0, description="seconds after the timeline origin")


class SetRate(_Event):
    """Change a shaped link's rate in place (tc class change)."""

    kind: Literal["set_rate"]
    link: str
    mbit: float = Field(gt=0, le=100000)


class CrossStart(_Event):
    """Start a group of N parallel iperf3 TCP streams from src to dst."""

    kind: Literal["cross_start"]
    id: str = Field(pattern=NAME_RE.pattern)
    src: str
    dst: str
    streams: int = Field(1, gt=0, le=128)
    bitrate_mbit: float | None = Field(None, gt=0, description="per-stream cap (iperf3 -b)")


class CrossStop(_Event):
    """Stop every iperf3 client of a cross_start or ramp group."""

    kind: Literal["cross_stop"]
    id: str


class Ramp(_Event):
    """The paper's congestion ramp: parallel streams rising step by step.

    Levels are start_streams, then each multiple of step_streams above it, up to
    max_streams (1, 10, 20, ..., 50 with step 10; 1, 2, ..., 50 with step 1), one level
    every every_s seconds. Each level adds one iperf3 client carrying the increment
    (iperf3 fixes -P per process), so the process count stays at the number of levels.
    """

    kind: Literal["ramp"]
    id: str = Field(pattern=NAME_RE.pattern)
    src: str
    dst: str
    start_streams: int = Field(1, gt=0, le=128)
    max_streams: int = Field(50, gt=0, le=1024)
    step_streams: int = Field(10, gt=0, le=128)
    every_s: float = Field(10.0, gt=0)
    hold_s: float | None = Field(None, ge=0, description="stop this long after the last level")

    @model_validator(mode="after")
    def _order(self) -> Ramp:
        if self.max_streams < self.start_streams:
            raise ValueError(
                f"max_streams ({self.max_streams}) < start_streams ({self.start_streams})"
            )
        return self

    def levels(self) -> list[int]:
        """Total stream counts at each step."""
        out = [self.start_streams]
        k = 1
        while k * self.step_streams <= self.max_streams:
            if k * self.step_streams > out[-1]:
                out.append(k * self.step_streams)
            k += 1
        if out[-1] != self.max_streams:
            out.append(self.max_streams)
        return out


class Trace(_Event):
    """Replay a bandwidth trace on a link as a series of rate changes.

    ``csv``: lines ``time,rate`` (seconds, Mbit/s), optional header. ``mahimahi``: one
    line per packet-delivery opportunity, in ms (each one MTU of 1500 bytes), binned
    into ``bin_ms`` windows to give a rate. Rates are multiplied by ``scale`` and floored
    at ``min_mbit`` (an HTB class cannot have rate 0).
    """

    kind: Literal["trace"]
    link: str
    file: str
    format: Literal["csv", "mahimahi"] = "csv"
    scale: float = Field(1.0, gt=0)
    min_mbit: float = Field(0.1, gt=0)
    bin_ms: int = Field(1000, gt=0)
    duration_s: float | None = Field(
        None, gt=0, description="replay this long, looping the trace; default: once"
    )

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Trace:
        from testbed.config.traces import TraceError, parse_trace

        base = (info.context or {}).get("base_dir") or Path.cwd()
        path = Path(self.file).expanduser()
        if not path.is_absolute():
            path = Path(base) / path
        if not path.is_file():
            raise ValueError(f"trace file not found: {path}")
        try:
            parse_trace(path, self.format, bin_ms=self.bin_ms)
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        self.file = str(path.resolve())
        return self


Event = Annotated[
    SetRate | CrossStart | CrossStop | Ramp | Trace, Field(discriminator="kind")
]


# --------------------------------------------------------------------------- scenario


def _method_ok(spec: str) -> str:
    check_method(spec)
    return spec


# Per item, so an error is located as methods[i].
MethodSpec = Annotated[str, AfterValidator(_method_ok)]


class Scenario(_Strict):
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
    capture: bool = Field(False, description="headers-only packet capture at the bottleneck "
                          "(capture.pcap, capture.csv); off by default, see "
                          "benchmarks/capture_overhead.py for its cost")
    timeout_s: float | None = Field(None, gt=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
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
        links = link_names(topo)
        hosts = host_names(topo)
        ids: set[str] = set()
        for i, ev in enumerate(self.timeline):
            where = f"timeline[{i}] ({ev.kind})"
            if isinstance(ev, SetRate | Trace) and ev.link not in links:
                raise ValueError(f"{where}: unknown link {ev.link!r}; links: {', '.join(links)}")
            if isinstance(ev, CrossStart | Ramp):
                for role in ("src", "dst"):
                    host = getattr(ev, role)
                    if host not in hosts:
                        raise ValueError(
                            f"{where}: unknown {role} host {host!r}; hosts: {', '.join(hosts)}"
                        )
                if ev.src == ev.dst:
                    raise ValueError(f"{where}: src and dst are the same host")
                if ev.id in ids:
                    raise ValueError(f"{where}: duplicate id {ev.id!r}")
                ids.add(ev.id)
            if isinstance(ev, CrossStop):
                earlier = {
                    e.id for e in self.timeline[:i] if isinstance(e, CrossStart | Ramp)
                }
                if ev.id not in earlier:
                    raise ValueError(f"{where}: no earlier cross_start/ramp with id {ev.id!r}")
        impaired = [f for f in NETEM_FIELDS if getattr(topo, f) > 0]
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
    raw = str(name_or_path)
    path = Path(raw).expanduser()
    looks_like_path = "/" in raw or raw.endswith((".yaml", ".yml")) or path.is_file()
    if looks_like_path:
        if not path.is_file():
            raise ScenarioError(f"scenario file not found: {raw}")
        return path
    if not NAME_RE.fullmatch(raw):
        raise ScenarioError(f"invalid scenario name {raw!r}")
    candidate = SCENARIO_DIR / f"{raw}.yaml"
    if not candidate.is_file():
        known = ", ".join(p.stem for p in sorted(SCENARIO_DIR.glob("*.yaml")))
        raise ScenarioError(f"unknown scenario {raw!r}; available: {known}")
    return candidate


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("star", "dumbbell", "leafspine", "set_rate", "cross_start",
                      "cross_stop", "ramp", "trace"):
            continue  # discriminator tag pydantic inserts into the path
        else:
            out += f".{part}" if out else str(part)
    return out


def format_validation_error(exc: ValidationError) -> str:
    """First error of a pydantic ValidationError as ``path: message (got X)``."""
    err = exc.errors(include_url=False)[0]
    loc = _format_loc(tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    etype = err.get("type", "")
    if etype == "extra_forbidden":
        msg = "unknown field"
    elif etype == "missing":
        msg = "required field missing"
    elif "input" in err and etype not in ("union_tag_invalid", "model_type", "value_error"):
        got = err["input"]
        if isinstance(got, str | int | float | bool) or got is None:
            msg = f"{msg} (got {got!r})"
    return f"{loc}: {msg}" if loc else msg


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
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"scenario {label}: YAML syntax error at{where}: {problem}") from None
    except OSError as exc:
        raise ScenarioError(f"scenario {label}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {label}: top level must be a mapping")
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
