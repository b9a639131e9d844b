"""Scenario files: the pydantic schema, loading by name or path, and overrides.

A scenario says everything one experiment needs: which topology to build and how big,
the link rates (Mbit/s) and queue sizes (the topology's own ``Params`` model, found
through ``topologies.registry``), the training workload, the methods and seeds to
compare, and a timeline of network events. All validation happens here, *before* anything
is built, so that a typo costs an error line and never a half-built network: unknown
fields are refused (``extra="forbid"``), methods go through ``netsenseml.methods.parse``,
links and hosts named by events are checked against the names the topology *will* have
(computed from the config, no Mininet involved), trace files must exist and parse, and the
netem fields (delay, jitter, loss) are refused when the running kernel has no sch_netem, and
a TCP congestion control it does not allow an emulated host's namespace.

Overrides (used by sweeps and ``netsense run --set``) address fields by dotted path and
re-validate the whole scenario. Paths (``N`` is a list index)::

    name, description, timeline_origin, probe_links, probe_s, timeout_s, capture, convergence
    topology.kind     a name in topologies.registry (star | dumbbell | leafspine), or
                      package.module:Class for a user's topology (topologies/PLUGINS.md)
    topology.<field>  the kind's own fields, from its Params model, e.g.
                      topology.n_workers, topology.rate_mbit (star),
                      topology.bottleneck_mbit (dumbbell), topology.uplink_mbit (leafspine),
                      topology.queue_pkts, topology.delay_ms, topology.jitter_ms,
                      topology.loss_pct, topology.congestion_control (every built-in;
                      the last checked against this kernel when the scenario is loaded)
    workload.model (a name in workloads.registry, or package.module:factory for a user's
    model importable by the workers), workload.dataset (a name in workloads.registry),
    workload.batch_size, workload.steps,
    workload.time_limit_s, workload.eval_every, workload.target_accuracy, workload.lr,
    workload.threads, workload.data_dir, workload.args.<knob>   (e.g. workload.args.width)
    workload.backend (auto | gloo | nccl), workload.device (auto | cpu | cuda)
    methods, methods.N, seeds, seeds.N
    timeline.N.at_s, timeline.N.<field>   e.g. timeline.0.max_streams, timeline.1.rate_mbit

Consumer bounds: passing the schema means the run can use the value, so every
number is finite (no ``.inf``/``.nan``) and within what its consumer takes: HTB rates in
[MIN_MBIT, MAX_MBIT]; iperf3 ``-P`` at most 128 streams and ``-t`` whole seconds; names
that become file names short enough for NAME_MAX with the run id appended;
``workload.args`` keys must be options of the worker's parser that the scenario does not
already set (``workloads.options``), with values of the option's type; seeds fit numpy's
32 bits. Events must fall before the run's end (``workload.time_limit_s``, or the run's
deadline for step-counted runs): an event the run cannot reach is refused here, and one
that still did not happen at run time (a step-counted run ended first) fails the run
(``testbed.orchestration.run``). A ``cross_stop`` may not come before the start (or the
last ramp level) it stops. Trace replays are cut at the run's end.

Field names follow one convention (``*_mbit`` rates, ``*_s`` seconds); older names
(``at``, ``mbit``, ``probe_seconds``) are still read, with a note: testbed.config.renames.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from netsenseml import convergence, methods
from netsenseml.dilation import NONE, Dilation
from testbed.common import bounded, inputs, schema
from testbed.common.names import is_name
from testbed.common.schema import StrictModel
from testbed.config import renames
from testbed.config.accelerator import Accelerator
from testbed.config.events import (
    EVENT_KINDS,
    MAX_SECONDS,
    CrossStart,
    CrossStop,
    Event,
    Names,
    Ramp,
    expand,
)
from topologies import registry as topology_registry
from topologies.spec import TopologyParams
from workloads import options as worker_options
from workloads import registry

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
#: Longest scenario name: a folder name, and shown in every table.
MAX_NAME_LEN = 128
#: Longest method spec: the run id ``YYYYmmdd-HHMMSS-<method>-s<seed>-<n>`` is one file
#: name (NAME_MAX 255 bytes) and the seed and suffix take up to 32 of them.
MAX_METHOD_LEN = 200
MAX_STEPS = 100_000_000
#: numpy seeds are 32-bit.
MAX_SEED = 2**32 - 1
#: Most iperf3 client processes a timeline may start (one per cross_start, one per ramp
#: level; each also gets its own server, all started before training).
MAX_FLOW_CLIENTS = 256
#: Most rate changes the host applies in one real second: each is a ``tc class change`` on
#: both ends of its link (2.3 ms for one on this 2-core machine at load 3, measured
#: 2026-12-06; 20 ms allowed per change for the two ends, the namespace entry and training
#: sharing the cores). A denser timeline is refused at validation (it would fall behind and
#: end as a timeline that did not happen, or starve the workers).
MAX_RATE_CHANGES_PER_S = 50


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


def link_names(topo: TopologyParams) -> list[str]:
    """Logical names of the links events may target, computed from the config without
    building; ``run.py`` checks them against ``Emulation.links()`` after the build."""
    return topo.link_names()


def build_params(topo: TopologyParams) -> dict[str, Any]:
    """The Topo.build keyword arguments for the emulation layer (impairments 0 -> None)."""
    return topo.build_params()


# --------------------------------------------------------------------------- workload


#: Interpreter names in a workload's ``command`` that mean the testbed's own Python (the
#: venv's, ``sys.executable``), so the job imports the same torch and netsenseml.
PYTHON_NAMES = ("python", "python3")
#: Workload fields that configure the built-in worker only; with a ``command`` each must
#: stay at its default (the job has its own arguments for these).
BUILTIN_ONLY = ("model", "dataset", "batch_size", "steps", "eval_every", "lr", "data_dir",
                "pg_timeout_s", "args")


class Workload(StrictModel):
    """The training job: the built-in worker's arguments (``python -m workloads.train``), or
    a user's own script (``command``), started in every worker host as torchrun would."""

    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None, min_length=1, max_length=256)
    """Your own training job instead of the built-in worker, e.g. [python, my_job.py, --epochs, "2"]: started in every worker host with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...); python is the testbed's interpreter; a script path is relative to the scenario file. The job calls hooks.register(model) (README section 4). Fields of the built-in worker (model, dataset, batch_size, steps, eval_every, lr, data_dir, pg_timeout_s, args) are refused beside it."""
    cwd: str | None = Field(None, min_length=1, max_length=4096)
    """With command: the job's folder (relative to the scenario file; none: the scenario file's folder): first on the job's Python path (its modules and python -m import from it) and in NETSENSE_JOB_DIR. The job runs in a working directory of its own on every host, inside the run folder (hosts/<host>/), as on separate machines: what it writes there is never seen by another run."""
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)],
              Annotated[str, Field(max_length=65536)]] = Field(default_factory=dict)
    """With command: more environment variables for the job (the testbed's own RANK, NETSENSE_* ... cannot be overridden)."""
    samples_per_step: int | None = Field(None, gt=0, le=2**31 - 1)
    """With command: the samples each rank trains per step (the job's per-rank batch, its micro-batches together), for samples/s when the job does not report them (hooks.report(samples=...)); none: the batch the hook sees the model's training forward passes given (netsenseml.job)."""

    model: str = "mlp"  # a name in workloads.registry or package.module:factory
    """Model to train: a name of `netsense list` (mlp, resnet18, gpt, ...) or package.module:factory for your own. Default mlp."""
    dataset: str = "digits"  # a name in workloads.registry
    """Dataset: a name of `netsense list` that fits the model (digits, synthetic, text, mixture, ...). Default digits."""
    batch_size: int = Field(32, gt=0, le=65536)
    """Samples per worker per step (the global batch is this x the number of workers). Default 32."""
    steps: int | None = Field(None, gt=0, le=MAX_STEPS)
    """Training steps per worker; give this or time_limit_s, not both."""
    time_limit_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds of training (on the workers' training clock) before they stop; give this or steps."""
    eval_every: int | None = Field(None, gt=0, le=MAX_STEPS)
    """Evaluate held-out accuracy every this many steps (none: only at the end). Time to accuracy is only as fine as this."""
    target_accuracy: float | None = Field(None, gt=0, le=1)
    """Held-out accuracy (fraction, 0-1] whose first crossing is the run's time to accuracy; none: no TTA."""
    lr: float | None = Field(None, gt=0, le=1000)
    """Learning rate; none: the model's own default (workloads.registry)."""
    threads: int = Field(1, gt=0, le=64)
    """torch CPU threads per worker. Default 1 (a worker per core is the emulation's budget)."""
    data_dir: str | None = Field(None, min_length=1, max_length=4096)
    """Folder holding the dataset's files when they are not bundled (e.g. CIFAR); none: bundled or synthetic data."""
    pg_timeout_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds a collective may wait for a peer before the worker fails the run; none: the worker's default (60). Raise it for long steps on slow links."""
    # auto: in the emulation, CUDA + NCCL when every worker can have a GPU of its own, else
    # CPU + gloo (testbed.orchestration.gpus); the worker's --backend/--device.
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend: auto (NCCL when every worker can have its own GPU, else gloo), gloo or nccl."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model runs: auto (CUDA when every worker can have a GPU), cpu or cuda."""
    grads: Literal["real", "recorded", "payload"] = "real"
    """real: every step computes its gradient (default). recorded: one real gradient is computed before training and handed to DDP every step through the normal hook path, with no backward on the host (workloads/recorded_gradient.py). payload: no model, gradient or codec on the host; DDP's bucket layout from the model's shapes, every collective carries the bytes the method would send, compute and codec times from the accelerator profile (needs an accelerator: block; workloads/payload.py). recorded and payload are for throughput runs: the model does not train, so no eval_every or target_accuracy."""
    args: dict[str, int | float | str | bool] = Field(default_factory=dict)
    """More worker options by name (e.g. width: 256, stop_at_target: true): any option of `python -m workloads.train -h` that the scenario does not set already."""

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
    def _command(self, info: ValidationInfo) -> Workload:
        """A command: built-in fields refused, its script and folder found (made absolute,
        so config.json and overrides re-validate anywhere)."""
        if self.command is None:
            for name in ("cwd", "env", "samples_per_step"):
                if getattr(self, name):
                    raise ValueError(f"{name}: only for an own job (workload.command)")
            return self
        defaults = {n: Workload.model_fields[n].get_default(call_default_factory=True)
                    for n in BUILTIN_ONLY}
        for name in BUILTIN_ONLY:
            if getattr(self, name) != defaults[name]:
                raise ValueError(
                    f"{name}: a field of the built-in worker; an own job (workload.command) "
                    "sets it with its own arguments; remove it (or drop the command)"
                    + ("; samples_per_step states its batch for samples/s"
                       if name == "batch_size" else ""))
        base = Path((info.context or {}).get("base_dir") or Path.cwd())
        cwd = Path(self.cwd).expanduser() if self.cwd else base
        cwd = (cwd if cwd.is_absolute() else base / cwd).resolve()
        if not cwd.is_dir():
            raise ValueError(f"cwd: no such folder {str(cwd)!r}")
        self.cwd = str(cwd)
        self.command = resolve_command(self.command, base)
        reserved = sorted(k for k in self.env if k in RESERVED_ENV or k.startswith("NETSENSE_"))
        if reserved:
            raise ValueError(f"env.{reserved[0]}: set by the testbed for every own job")
        return self

    @property
    def own_job(self) -> bool:
        """A user's own command instead of the built-in worker."""
        return self.command is not None

    @model_validator(mode="after")
    def _one_length(self) -> Workload:
        if self.command is not None:
            return self  # the job decides its length; time_limit_s only bounds the run
        if (self.steps is None) == (self.time_limit_s is None):
            raise ValueError("give exactly one of steps or time_limit_s")
        if self.grads != "real" and (self.eval_every or self.target_accuracy):
            raise ValueError(f"grads: {self.grads} gradients do not train the model; drop "
                             "eval_every and target_accuracy (accuracy cannot be measured)")
        if not registry.is_plugin(self.model):
            entry = registry.model_entry(self.model)
            if not registry.fits(entry, registry.dataset_entry(self.dataset)):
                raise ValueError(f"dataset {self.dataset!r} does not fit model {self.model!r}; "
                                 f"accepted: {', '.join(registry.datasets_for(entry))}")
        return self

    @field_validator("args")
    @classmethod
    def _knob_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, str] = {}
        for key, value in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]*", key):
                raise ValueError(f"bad knob name {key!r} (lowercase letters, digits, _ and -)")
            try:
                worker_options.check_arg(key, value)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            name = worker_options.option_name(key)
            if name in seen:
                raise ValueError(f"{key}: same option as {seen[name]!r}")
            seen[name] = key
        return v

    def arg(self, name: str, default: Any = None) -> Any:
        """The worker option ``name`` (``context``, ``stop-at-target``) as ``args`` gives it,
        under either spelling (``stop_at_target``), or ``default``."""
        args = {worker_options.option_name(k): v for k, v in (self.args or {}).items()}
        return args.get(worker_options.option_name(name), default)

    def knobs(self) -> dict[str, Any]:
        """The model's size knobs, resolved as the worker resolves them (defaults filled)."""
        if self.command is not None:
            return {}
        args = {worker_options.option_name(k): v for k, v in self.args.items()}
        knobs: dict[str, Any] = {k.replace("-", "_"): args[k]
                                 for k in ("width", "layers", "d-model") if k in args}
        knobs.update(registry.parse_knobs(str(args.get("model-args", ""))))
        if registry.is_plugin(self.model):
            return knobs
        return registry.model_entry(self.model).resolve_knobs(knobs)

    @model_validator(mode="after")
    def _worker_accepts(self) -> Workload:
        """What the worker's parse_args checks beyond types, checked here first."""
        args = {worker_options.option_name(k): v for k, v in self.args.items()}
        if args.get("stop-at-target") and (self.target_accuracy is None or not self.eval_every):
            raise ValueError("args.stop_at_target needs workload.target_accuracy and "
                             "workload.eval_every")
        knobs: dict[str, Any] = {k.replace("-", "_"): args[k]
                                 for k in ("width", "layers", "d-model") if k in args}
        try:
            knobs.update(registry.parse_knobs(str(args.get("model-args", ""))))
            if not registry.is_plugin(self.model):
                registry.model_entry(self.model).resolve_knobs(knobs)
        except registry.RegistryError as exc:
            raise ValueError(f"args: {exc}") from None
        for key, value in knobs.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and (
                    not math.isfinite(value) or abs(value) > worker_options.MAX_INT):
                raise ValueError(f"args: knob {key}={value!r} out of range "
                                 f"(|value| <= {worker_options.MAX_INT})")
        if self.data_dir is not None and not Path(self.data_dir).expanduser().is_dir():
            raise ValueError(f"data_dir: no such folder {self.data_dir!r}")
        return self


#: Environment variables the testbed sets for an own job (``workers.job_env``).
RESERVED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                "NCCL_HOSTID", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RUN_ID")


def resolve_command(command: list[str], base: Path) -> list[str]:
    """A workload's command with its program and script found (ValueError, one line).

    ``python``/``python3`` stay as written (the launch runs the testbed's interpreter);
    after them, a script path (relative to ``base``, the scenario file's folder) must be a
    file, ``-m module`` is left to the job's own Python path, ``-c code`` is taken as is.
    Any other program is a path (relative to ``base``; a ``.py`` file runs with the
    testbed's Python, anything else must be executable) or a name on PATH.
    """
    out = list(command)

    def path_of(text: str, what: str) -> str:
        p = Path(text).expanduser()
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise ValueError(f"command: {what} {text!r} not found (looked for {str(p)!r}; a "
                             "relative path is taken from the scenario file's folder)")
        return str(p.resolve())

    if out[0] in PYTHON_NAMES:
        if len(out) < 2:
            raise ValueError("command: python needs a script (python my_job.py ...) or -m module")
        if out[1] not in ("-m", "-c") and not out[1].startswith("-"):
            out[1] = path_of(out[1], "script")
        elif out[1] in ("-m", "-c") and len(out) < 3:
            raise ValueError(f"command: python {out[1]} needs its argument")
        return out
    if "/" in out[0] or out[0].endswith(".py"):
        out[0] = path_of(out[0], "program")
        if not out[0].endswith(".py") and not os.access(out[0], os.X_OK):
            raise ValueError(f"command: program {out[0]!r} is not executable (chmod +x, or "
                             "start it with python)")
        return out
    if shutil.which(out[0]) is None:
        raise ValueError(f"command: program {out[0]!r} not found on PATH")
    return out


# --------------------------------------------------------------------------- scenario


def _method_ok(spec: str) -> str:
    check_method(spec)
    return spec


# Per item, so an error is located as methods[i].
MethodText = Annotated[str, AfterValidator(_method_ok)]


class Scenario(StrictModel):
    """One experiment: a network, a workload, methods x seeds, and a timeline."""

    _specs: dict[str, Any] = PrivateAttr(default_factory=dict)  # method text -> its MethodSpec

    name: str = Field(max_length=MAX_NAME_LEN)
    """Scenario name: the results folder's name (letters, digits, '.', '_', '-')."""
    description: str = Field("", max_length=10000)
    """One line shown by `netsense list`. Default empty."""
    topology: Topology
    """The emulated network: kind (star, dumbbell, leafspine, hosts, or package.module:Class) and that kind's fields; `netsense list` shows each kind's hosts and links."""
    workload: Workload
    """The training job every method runs."""
    methods: list[MethodText] = Field(min_length=1)
    """Methods to compare (`netsense list`): e.g. allreduce, fp16, int8, topk:0.01, powersgd:4, netsenseml; one run each per seed."""
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default_factory=lambda: [0], min_length=1, max_length=1000)
    """Seeds to run every method with; one run folder per method and seed. Default [0]."""
    timeline: list[Event] = Field(default_factory=list, max_length=10000)
    """Network events during training (set_rate, cross_start, cross_stop, ramp, trace), at at_s seconds from timeline_origin. Default none."""
    timeline_origin: Literal["launch", "first_step"] = Field(
        "first_step",
        description="What the events' at_s count from: first_step (default), rank 0's "
        "first training step, so events land at the same point of training however long "
        "the workers take to start; launch, the workers' start (start-up included)",
    )
    probe_links: bool = False
    """Measure each shaped link with iperf3 before training (link.csv). Default false."""
    probe_s: float = Field(2.0, ge=1, le=60, multiple_of=1,
                           description="Seconds each link is probed with probe_links, whole "
                           "seconds (iperf3 -t takes an integer). Default 2")
    timeout_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Wall-clock seconds after which the run is stopped and marked failed; none: derived from the workload's length."""
    capture: bool = Field(False, description="Headers-only packet capture at the bottleneck "
                          "(capture.pcap, capture.csv); off by default, see "
                          "benchmarks/capture_overhead.py for its cost")
    accelerator: Accelerator | None = None
    """The emulated accelerator and the time dilation (testbed.config.accelerator); none: a native run, the host's CPU sets the compute time."""
    convergence: str | None = Field(
        None, min_length=1, max_length=4096,
        description="netsenseml's convergence prior: a table written by `netsense convergence` "
        "(path relative to the scenario file); none: the stated conservative default "
        "(netsenseml.convergence)")

    @field_validator("convergence")
    @classmethod
    def _convergence(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        base = (info.context or {}).get("base_dir") or Path.cwd()
        path = Path(v).expanduser()
        if not path.is_absolute():
            path = Path(base) / path
        try:
            return str(convergence.check_file(path))
        except convergence.ConvergenceError as exc:
            raise ValueError(str(exc)) from None

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
    def _keep_specs(self) -> Scenario:
        """The methods, parsed once where they enter (the file): the runs ask these specs."""
        self._specs = {m: methods.parse(m) for m in self.methods}
        return self

    def method_spec(self, method: str | methods.MethodSpec) -> methods.MethodSpec:
        """The spec of one of the scenario's methods (parsed with the scenario), a spec
        given as is, or another method text checked as the scenario checks its own (the CLI
        and the API may run any valid method)."""
        if isinstance(method, methods.MethodSpec):
            return method
        return self._specs.get(method) or check_method(method)

    @model_validator(mode="after")
    def _values_needed(self) -> Scenario:
        """A method that decides from gradient values (the registry's ``needs_values``:
        Accordion's norms) learns nothing from recorded gradients, the same every step, and
        payload mode has no values at all."""
        if self.workload.grads == "real":
            return self
        why = {"recorded": "grads: recorded hands DDP the same gradient every step",
               "payload": "grads: payload sends no gradient values"}[self.workload.grads]
        for i, m in enumerate(self.methods):
            if self.method_spec(m).needs_values:
                raise ValueError(f"methods[{i}]: {m} decides from gradient values, and "
                                 f"{why}; use grads: real or drop the method")
        return self

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Scenario:
        topo = self.topology
        names = Names(topo.link_names(), topo.hosts())
        for i, ev in enumerate(self.timeline):  # in file order: a stop needs its start
            try:
                ev.check(names)
            except ValueError as exc:
                raise ValueError(f"timeline[{i}] ({ev.kind}): {exc}") from None
        real_hosts = topo.kind == "hosts"  # their kernels decide about netem, at run time
        impaired = [] if real_hosts else topo.impairments()
        for i, ev in enumerate(self.timeline):
            where = f"timeline[{i}] ({ev.kind})"
            if isinstance(ev, CrossStop):
                earlier = {e.id: e for e in self.timeline[:i] if isinstance(e, CrossStart | Ramp)}
                start = earlier.get(ev.id)
                if start is not None:
                    begun = start.last_level_at() if isinstance(start, Ramp) else start.at_s
                    if ev.at_s < begun:
                        raise ValueError(
                            f"{where}.at_s: {ev.at_s:g} s is before {ev.id!r} has started "
                            f"({'its last level' if isinstance(start, Ramp) else 'cross_start'} "
                            f"at {begun:g} s)")
            self._check_reachable(where, ev)
        self._check_density()
        clients = sum(len(e.levels()) if isinstance(e, Ramp) else 1
                      for e in self.timeline if isinstance(e, CrossStart | Ramp))
        if clients > MAX_FLOW_CLIENTS:
            raise ValueError(f"timeline: {clients} iperf3 clients (one per cross_start and "
                             f"per ramp level), more than the {MAX_FLOW_CLIENTS} accepted")
        train = registry.dataset_entry(self.workload.dataset).train_samples
        if self.workload.own_job:
            train = None  # the job's data is its own
        if train is not None and self.workload.batch_size > train // self.world_size:
            raise ValueError(
                f"workload.batch_size: {self.workload.batch_size} exceeds each rank's shard of "
                f"{train // self.world_size} {self.workload.dataset} samples "
                f"({self.world_size} workers)")
        if self.workload.grads == "payload" and self.accelerator is None:
            raise ValueError("workload.grads: payload mode computes nothing on the host, so "
                             "the compute and codec times come from an accelerator: block "
                             "(profile or step_ms)")
        if self.accelerator is not None and self.workload.own_job:
            if self.accelerator.profile is not None:
                raise ValueError("accelerator.profile: a profile's entries are per built-in "
                                 "model; an own job (workload.command) takes accelerator.step_ms")
            if self.accelerator.dilation == "auto":
                raise ValueError("accelerator.dilation: auto times the built-in worker's step "
                                 "on this host; give an own job a number (e.g. 4)")
        elif self.accelerator is not None and not registry.is_plugin(self.workload.model):
            try:
                self.accelerator.timing(self.workload.model, self.workload.knobs(),
                                        self.workload.batch_size)
            except ValueError as exc:
                raise ValueError(f"accelerator.profile: {exc}") from None
        self._check_kernel(impaired, real_hosts, info)
        return self

    def _check_kernel(self, impaired: list[str], real_hosts: bool, info: ValidationInfo) -> None:
        """What this kernel must allow the emulated hosts: netem for the impairments, and
        the TCP congestion control in a namespace (not checked for a run folder's config
        read on another machine: ``skip_kernel_checks``)."""
        cc = getattr(self.topology, "congestion_control", None)
        if cc is not None and real_hosts:
            raise ValueError("topology.congestion_control: real hosts keep their own TCP (set "
                             "net.ipv4.tcp_congestion_control on each machine); it applies to "
                             "emulated hosts only")
        if getattr(self.topology, "ack_first", False) and real_hosts:
            raise ValueError("topology.ack_first: real hosts keep their own qdiscs; it applies "
                             "to emulated hosts only")
        if (impaired or cc is not None) and not (info.context or {}).get("skip_kernel_checks"):
            from testbed.emulation import kernel

            if impaired and not kernel.has_netem():
                raise ValueError(f"topology.{impaired[0]}: {kernel.NETEM_MISSING_MSG}")
            why = None if cc is None else kernel.congestion_control_error(cc)
            if why:
                raise ValueError(f"topology.congestion_control: {why}")

    def _check_density(self) -> None:
        """A timeline denser than the host applies rate changes is refused, with the rate
        it can apply (``MAX_RATE_CHANGES_PER_S`` per real second; under a given time
        dilation ``k`` that many per virtual second x ``k``)."""
        if not self.timeline:
            return
        d = NONE
        if self.accelerator is not None and self.accelerator.dilation != "auto":
            d = Dilation(float(self.accelerator.dilation))
        actions, _ = expand(self.timeline, end_s=self.workload.time_limit_s)
        times = [a.at for a in actions if a.kind == "set_rate"]
        limit = d.virtual_per_s(MAX_RATE_CHANGES_PER_S)  # per virtual second
        j = 0
        for i, t in enumerate(times):  # sorted: the densest window of 1 virtual second
            while times[j] <= t - 1.0:
                j += 1
            n = i - j + 1
            if n > limit:
                src = next(a.source for a in actions if a.kind == "set_rate" and a.at >= times[j])
                raise ValueError(
                    f"timeline: {n} rate changes within 1 s (from {times[j]:g} s, {src}) are "
                    f"more than this host applies: at most {MAX_RATE_CHANGES_PER_S} per "
                    "second (each is a tc call on both ends of the link)"
                    + (f", {limit:g} per virtual second at dilation {d.k:g}" if d.dilated else "")
                    + "; resample the trace coarser (bin_ms) or dilate time "
                    "(accelerator.dilation)")

    def warnings(self) -> list[str]:
        """What is valid but probably not meant, one line each (shown by ``show``, ``run``
        and ``--dry-run``, and kept in summary.json's warnings): cross traffic whose path
        shares no link with any path between two workers cannot congest the job."""
        topo = self.topology
        workers = topo.worker_hosts()
        training: set[str] = set()
        for a in workers:
            for b in workers:
                if a != b:
                    links = topo.path_links(a, b)
                    if links is None:
                        return []  # the topology does not say where its paths go
                    training |= links
        out = []
        for i, ev in enumerate(self.timeline):
            if not isinstance(ev, CrossStart | Ramp):
                continue
            links = topo.path_links(ev.src, ev.dst)
            if links is not None and not links & training:
                out.append(
                    f"timeline[{i}] ({ev.kind} {ev.id!r}): its flow {ev.src} -> {ev.dst} "
                    f"crosses {', '.join(sorted(links))}, no link of the training traffic "
                    f"({', '.join(sorted(training))}): it cannot congest the job; send it "
                    f"to or from a worker (e.g. dst: {workers[-1]})")
        return out

    def run_end_s(self) -> tuple[float, str]:
        """Latest event time the run can reach, and what sets it (for messages).

        A time-limited run ends at its time limit (events count from the launch or the
        first step, both at or before the workers' clock origin plus set-up); a
        step-counted one at the latest when the orchestrator's deadline kills it.
        """
        if self.workload.time_limit_s is not None:
            return self.workload.time_limit_s, "workload.time_limit_s"
        return self.deadline_s(), "the run's deadline (timeout_s, default 600 s)"

    def _check_reachable(self, where: str, ev: Any) -> None:
        end, what = self.run_end_s()
        times = [("at_s", ev.at_s)]
        if isinstance(ev, Ramp):
            times.append(("last level", ev.last_level_at()))
            if ev.stop_at() is not None:
                times.append(("stop (hold_s)", ev.stop_at()))
        for label, t in times:
            if t >= end:
                raise ValueError(f"{where}: {label} {t:g} s is not before the run's end "
                                 f"({what} = {end:g} s); the event could never happen")

    # convenience -----------------------------------------------------------------
    @property
    def competes(self) -> bool:
        """Whether flows compete with the job (a ``cross_start`` or ``ramp`` in the timeline)."""
        return any(isinstance(e, CrossStart | Ramp) for e in self.timeline)

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


def check_method(spec: str) -> methods.MethodSpec:
    """The method ``spec`` names, parsed; a ValueError naming the spec and the accepted
    forms if it is not a method.

    Grammar (``netsenseml.methods``, no torch), and for a plug-in ``pkg.mod:Name`` that its
    module is found on the Python path (not imported: that may need torch), as for model
    plug-ins; what the module holds is checked by the workers, which exit with one line.
    """
    if not isinstance(spec, str) or len(spec) > MAX_METHOD_LEN:
        raise ValueError(f"method spec longer than {MAX_METHOD_LEN} characters (it names "
                         "the run folder)")
    return methods.check_findable(spec)


# --------------------------------------------------------------------------- loading


def scenario_path(name_or_path: str | Path) -> Path:
    """A scenario file path: an existing path as given, else testbed/scenarios/<name>.yaml."""
    return inputs.resolve(name_or_path, SCENARIO_DIR, "scenario", ScenarioError)


def _misplaced_topology_field(exc: ValidationError, data: Mapping[str, Any] | None
                              ) -> str | None:
    """``topology.F: not a field of a K topology (...)`` when the topology has a field its
    kind does not take: said before any required field it then lacks (``rate_mbit`` in a
    dumbbell means the user meant ``bottleneck_mbit``, not that one is missing)."""
    topo = (data or {}).get("topology")
    kind = topo.get("kind") if isinstance(topo, Mapping) else None
    if not isinstance(kind, str) or kind not in topology_registry.kinds():
        return None
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        if err.get("type") == "extra_forbidden" and len(loc) == 2 and loc[0] == "topology" \
                and isinstance(loc[1], str):
            own = list(topology_registry.params_class(kind).model_fields)
            others = [k for k in topology_registry.kinds()
                      if k != kind and loc[1] in topology_registry.params_class(k).model_fields]
            if not others:  # unknown to every kind: a typo, said before a missing field
                close = difflib.get_close_matches(loc[1], own, n=1, cutoff=0.6)
                return f"topology.{loc[1]}: unknown field" + (
                    f"; did you mean {close[0]!r}?" if close else "")
            return (f"topology.{loc[1]}: not a field of a {kind} topology (its fields: "
                    f"{', '.join(f for f in own if f != 'kind')}); it is a field of "
                    f"{', '.join(others)}")
    return None


def format_validation_error(exc: ValidationError, data: Mapping[str, Any] | None = None
                            ) -> str:
    """First error of a pydantic ValidationError as ``path: message (got X)``; a topology
    field the chosen kind does not take comes first, named as such."""
    misplaced = _misplaced_topology_field(exc, data)
    if misplaced:
        return misplaced
    line = schema.one_line(exc, tags=EVENT_KINDS)
    err = exc.errors(include_url=False)[0]
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        hint = renames.suggest(Scenario, loc)
        if not hint and len(loc) == 2 and loc[0] == "topology" and isinstance(loc[1], str):
            # the topology is validated by its kind's own Params: suggest from the built-ins'
            fields = {f for k in topology_registry.kinds()
                      for f in topology_registry.params_class(k).model_fields}
            close = difflib.get_close_matches(loc[1], sorted(fields), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        line += hint
    return line


def validate_scenario(
    data: Mapping[str, Any], *, base_dir: Path | None = None, skip_kernel_checks: bool = False,
    label: str = "",
) -> Scenario:
    """Validate a mapping (old field names renamed first); raise ScenarioError, one line."""
    try:
        return Scenario.model_validate(
            renames.apply_renames(data, label),
            context={"base_dir": base_dir, "skip_kernel_checks": skip_kernel_checks},
        )
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, data)) from None


def load_scenario(name_or_path: str | Path, *, skip_kernel_checks: bool = False) -> Scenario:
    """Load and validate a scenario by name (testbed/scenarios/NAME.yaml) or by path.

    Raises ScenarioError whose message starts with ``scenario <file>:``.
    """
    path = scenario_path(name_or_path)
    label = path.name
    data = inputs.load_mapping(path, f"scenario {label}", ScenarioError)
    try:
        scn = validate_scenario(
            data, base_dir=path.resolve().parent, skip_kernel_checks=skip_kernel_checks,
            label=f"scenario {label}",
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
    overrides = {renames.rename_path(k): v for k, v in overrides.items()}
    for dotted, value in overrides.items():
        if not isinstance(dotted, str) or len(dotted) > 200:
            raise ScenarioError(f"override {str(dotted)[:40]!r}...: path longer than 200 "
                                "characters")
        parts = [p for p in re.split(r"\.|\[(\d+)\]", dotted) if p]
        if not parts:
            raise ScenarioError(f"override {dotted!r}: empty path")
        if len(parts) > 8:  # the deepest field is timeline.N.field / workload.args.knob
            raise ScenarioError(f"override {dotted!r}: no field that deep")
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
            data = bounded.load_yaml(path) or {}
            desc = str(data.get("description", "")).strip().splitlines()
            out.append((path.stem, desc[0] if desc else ""))
        except (bounded.BoundError, AttributeError) as exc:
            out.append((path.stem, f"(unreadable: {type(exc).__name__})"))
    return out
