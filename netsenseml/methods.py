"""Every gradient-communication method, registered once: its grammar and its properties.

Torch-free on purpose: the scenario schema, the sweep planner, plots and tables read method
names and properties here without paying a torch import (``python -X importtime -c
'import netsenseml.methods'`` lists no torch). Only :func:`resolve` imports the code a
method names, and only when asked (the hooks and the worker do).

A method string is one of::

    NAME            a built-in without argument        allreduce, fp16, int8, netsenseml
    NAME:ARG        a built-in with its argument       topk:0.01, powersgd:4
    pkg.mod:Name[:ARG]   a plug-in named by import path (see netsenseml/PLUGINS.md):
                    a compressor class (constructed with ARG) or a DDP comm hook function

Kinds (``MethodInfo.kind``):

* ``compressor`` -- a class following ``netsenseml.compress.base.Compressor``. The library
  adds error feedback (when the compressor declares ``lossy``), byte and time accounting,
  and the communication its ``reduction`` asks for.
* ``hook`` -- a function with DDP's comm-hook signature ``(state, bucket) -> Future``. Its
  collectives are counted by the process group it is given (``netsenseml.counted_group``);
  ``state`` is that group unless the entry names a ``state`` factory (PowerSGD).
* ``adaptive`` -- the NetSenseML step loop (``hooks.netsenseml_hook``) driven by the policy
  class named by ``target``, constructed with ``options`` plus the user's keywords
  (``netsenseml``, the prototype's rule ``netsenseml-paper`` and the published peers
  ``stellatrain`` and ``accordion``).

The method spec (:class:`MethodSpec`) is the value the rest of the code carries: a method's
text is parsed once where it enters (a scenario, the command line, the worker's argv, an own
job's environment, ``hooks.register``), and every layer asks the spec what it needs -- its
codecs, its collective, whether it adapts, whether its policy reads the convergence prior,
its label -- answered here from the registry; no layer parses the text again or compares a
method's name (``parse`` hands a spec back as itself). ``str(spec)`` is the text as
written: what the records, folder names and argv carry.

Adding a built-in compressor: one module under ``netsenseml/compress/`` and one
``register(MethodInfo(...))`` line below, at the place it should appear in listings and
plots (registration order is display order).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Kind = Literal["compressor", "hook", "adaptive"]


@dataclass(frozen=True)
class ArgKind:
    """How the ``ARG`` of ``name:ARG`` is parsed and bounded."""

    symbol: str  # as shown in the accepted forms, e.g. "R"
    rule: str  # the bound, as shown: "0<R<=1"
    parse: Callable[[str], Any]
    ok: Callable[[Any], bool]


def _int(text: str) -> int:
    return int(text.strip())


ARG_KINDS: Mapping[str, ArgKind] = MappingProxyType({
    "ratio": ArgKind("R", "0<R<=1", float, lambda v: 0.0 < v <= 1.0),  # NaN fails both
    "rank": ArgKind("RANK", "integer>=1", _int, lambda v: v >= 1),
})


@dataclass(frozen=True)
class MethodInfo:
    """One registered method and the properties other parts read.

    ``target``: ``"module:attr"`` of the compressor class, the hook function or the policy
    class, imported only by :func:`resolve`. ``arg``: a key of :data:`ARG_KINDS` or None.
    ``lossy``: error feedback on by default (the compressor's own ``lossy`` decides at run
    time; a test keeps both equal). ``reduction``: ``"allreduce"`` or ``"allgather"``
    (compressors). ``memory``: ``"residual"`` or ``"momentum"`` (DGC's momentum correction)
    for lossy compressors. ``ladder``: a level the NetSenseML policy may choose. ``wire``:
    bytes on the wire relative to fp32, per unit of the ratio for ``ratio`` methods (None
    when it depends on more than that). ``level``: the label of the ``level`` column in the
    step records (default: the name). ``options``: keywords for ``target``'s constructor.
    ``state``: for hooks, ``"module:function"`` building the hook's state from
    ``(process_group, spec, error_feedback, options)``. ``needs_values``: the method's
    decisions read gradient values (Accordion's gradient norms), so a run that sends bytes
    without real gradient values cannot host it. ``reference``: DDP's own fp32 allreduce, no
    codec work, the baseline the others are compared with. ``prior``: the policy takes the
    convergence prior (``netsense convergence``'s table, ``convergence=``) and
    ``calibration`` the registration calibration's options (``netsenseml.calibration``:
    ``calibration_bytes`` / ``calibration_ratio``). ``payload_hook``: a hook with a
    payload-mode stand-in sending its real sizes (``netsenseml.payload``: PowerSGD).
    ``dense_steps``: the first steps a hook sends the dense gradient (PowerSGD's
    ``start_powerSGD_iter``, ``hooks.powersgd_state``). ``topk``: it sends a top-k selection
    of its ratio (exactly, or by a sampled threshold: DGC), so it converges and is validated
    as top-k at that ratio. ``calibrated``: the simulation's calibration (``netsense simulate
    calibrate``) keeps its runs' compute per level it chose (NetSenseML's own overhead).
    ``collectives``: the collectives one bucket takes a step, one after another (PowerSGD:
    its rank-1 vectors, P, Q): what payload mode's dilation rule counts the host's cost of.
    ``plan``: ``"module:attr"`` of an adaptive rule's open-loop plan, ``(steps,
    samples_per_step, **options) ->`` a decision (``level``, ``ratio``) per step, where its
    start and descent do not wait on the network (the prototype's): what an estimate of a
    run's time uses.
    """

    name: str
    kind: Kind
    target: str
    summary: str
    arg: str | None = None
    lossy: bool = False
    reduction: str | None = None
    memory: str | None = None
    ladder: bool = False
    wire: float | None = None
    level: str = ""
    aliases: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    state: str | None = None
    needs_values: bool = False
    reference: bool = False
    prior: bool = False
    calibration: bool = False
    payload_hook: bool = False
    dense_steps: int = 0
    topk: bool = False
    calibrated: bool = False
    collectives: int = 1
    plan: str | None = None

    @property
    def label(self) -> str:
        return self.level or self.name

    @property
    def form(self) -> str:
        if self.arg is None:
            return self.name
        kind = ARG_KINDS[self.arg]
        return f"{self.name}:{kind.symbol} ({kind.rule})"


_REGISTRY: dict[str, MethodInfo] = {}
_ALIASES: dict[str, str] = {}

PLUGIN_FORM = "package.module:Name[:ARG] (a compressor class or a DDP comm hook)"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_PLUGIN_RE = re.compile(rf"^(?P<module>{_IDENT}(?:\.{_IDENT})*):(?P<attr>{_IDENT}(?:\.{_IDENT})*)(?::(?P<arg>.*))?$")
_REDUCTIONS = ("allreduce", "allgather")
#: The codecs an adaptive method's hook can run, as ``auto``'s host timing times them.
ADAPTIVE_CODECS = ("fp16", "int8", "topk:0.01")


def register(info: MethodInfo) -> MethodInfo:
    """Adds a built-in method; a name or alias may be registered once."""
    for key in (info.name, *info.aliases):
        if key in _REGISTRY or key in _ALIASES or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", key):
            raise ValueError(f"method name {key!r} is taken or not lower-case [a-z0-9_-]")
    if info.arg is not None and info.arg not in ARG_KINDS:
        raise ValueError(f"method {info.name!r}: arg must be one of {sorted(ARG_KINDS)}")
    if info.kind == "compressor" and info.reduction not in _REDUCTIONS:
        raise ValueError(f"method {info.name!r}: reduction must be one of {_REDUCTIONS}")
    _REGISTRY[info.name] = info
    for alias in info.aliases:
        _ALIASES[alias] = info.name
    return info


# ----------------------------------------------------------------------------- built-ins
# Registration order is the display order of listings, the accepted forms and plots.
_C = "netsenseml.compress"
register(MethodInfo("allreduce", "compressor", f"{_C}.cast:NoCompression",
                    "fp32 allreduce (DDP's default)", reduction="allreduce", ladder=True,
                    wire=1.0, level="none", aliases=("none",), reference=True))
register(MethodInfo("fp16", "compressor", f"{_C}.cast:CastCompressor",
                    "cast to fp16, allreduce, cast back", reduction="allreduce", ladder=True,
                    wire=0.5, options={"wire_dtype": "float16"}))
register(MethodInfo("bf16", "compressor", f"{_C}.cast:CastCompressor",
                    "cast to bf16, allreduce, cast back", reduction="allreduce", ladder=True,
                    wire=0.5, options={"wire_dtype": "bfloat16"}))
register(MethodInfo("int8", "compressor", f"{_C}.quantize:Int8Compressor",
                    "8-bit codes + per-rank scale, all-gathered", lossy=True,
                    reduction="allgather", memory="residual", ladder=True, wire=0.25))
register(MethodInfo("topk", "compressor", f"{_C}.sparse:TopKCompressor",
                    "exact top-k values + int32 indices, all-gathered", arg="ratio", lossy=True,
                    reduction="allgather", memory="residual", ladder=True, wire=2.0,
                    options={"method": "exact"}, topk=True))
register(MethodInfo("randomk", "compressor", f"{_C}.sparse:RandomKCompressor",
                    "random-k values under a shared seed, allreduced", arg="ratio", lossy=True,
                    reduction="allreduce", memory="residual", wire=1.0))
register(MethodInfo("dgc", "compressor", f"{_C}.sparse:TopKCompressor",
                    "top-k by sampled threshold, momentum correction", arg="ratio", lossy=True,
                    reduction="allgather", memory="momentum", wire=2.0,
                    options={"method": "sampled"}, topk=True))
register(MethodInfo("powersgd", "hook",
                    "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook:powerSGD_hook",
                    "torch's powerSGD_hook (low-rank P, Q)", arg="rank", lossy=True,
                    state="netsenseml.hooks:powersgd_state", payload_hook=True,
                    dense_steps=2, collectives=3))
#: The method this library proposes and its prototype's rule, by name: what the report and
#: the figures compare the others with (``testbed.analysis.tables.ADAPTIVE``), named here once.
PROPOSED = "netsenseml"
PROTOTYPE = "netsenseml-paper"
register(MethodInfo(PROPOSED, "adaptive", "netsenseml.policy:NetSensePolicy",
                    "the adaptive policy: none -> fp16 -> int8 -> top-k(r)", lossy=True,
                    level="none", prior=True, calibration=True, calibrated=True))
register(MethodInfo(PROTOTYPE, "adaptive", "netsenseml.paper_rule:PaperRule",
                    "the NetSenseML prototype's BDP rule on one top-k fraction", lossy=True,
                    level="topk", plan="netsenseml.paper_rule:PaperRule.open_loop"))
# The adaptive peers (issue 49): published rules, each in its own module's docstring.
register(MethodInfo("stellatrain", "adaptive", "netsenseml.stellatrain:StellaTrainPolicy",
                    "StellaTrain's rule: the top-k fraction whose traffic fits a smoothed, "
                    "wait-backed-off goodput target", lossy=True, level="topk"))
register(MethodInfo("accordion", "adaptive", "netsenseml.accordion:AccordionPolicy",
                    "Accordion's rule: per bucket light (none) or heavy (top-k 0.1) from the "
                    "change of the accumulated gradient norm", lossy=True, level="none",
                    needs_values=True))


# ----------------------------------------------------------------------------- accessors
def get(name: str) -> MethodInfo:
    """The registered method called ``name`` (or an alias); KeyError otherwise."""
    return _REGISTRY[_ALIASES.get(name, name)]


def names() -> tuple[str, ...]:
    """Built-in method names in display order."""
    return tuple(_REGISTRY)


def infos() -> tuple[MethodInfo, ...]:
    return tuple(_REGISTRY.values())


def ladder() -> tuple[MethodInfo, ...]:
    """The levels the NetSenseML policy may choose, in display order (least reduction first)."""
    return tuple(i for i in _REGISTRY.values() if i.ladder)


def ladder_specs() -> tuple[MethodSpec, ...]:
    """Each level of the ladder as a spec (a ratio level at ratio 1): an adaptive hook's codecs."""
    return _ladder_specs()


def dense_levels() -> tuple[MethodSpec, ...]:
    """The ladder's levels that take no argument (none, fp16, bf16, int8), as specs."""
    return tuple(s for s in _ladder_specs() if s.ratio is None)


def level_order() -> tuple[str, ...]:
    """Labels of the step records' ``level`` column in display order (plots, tables)."""
    out: list[str] = []
    for info in _REGISTRY.values():
        if info.kind != "adaptive" and info.label not in out:
            out.append(info.label)
    return tuple(out)


def bytes_ratio(level: str, ratio: float = 1.0) -> float:
    """Wire bytes of a level (a ``level`` label or method name) relative to fp32."""
    info = _by_label(level)
    if info is None or info.wire is None:
        raise KeyError(f"no wire-bytes ratio registered for level {level!r}")
    return info.wire * ratio if info.arg == "ratio" else info.wire


def _by_label(level: str) -> MethodInfo | None:
    for info in _REGISTRY.values():
        if info.label == level and info.kind != "adaptive":
            return info
    try:
        return get(level)
    except KeyError:
        return None


def forms(kind: Kind | None = None, plugins: bool = True) -> str:
    """The accepted forms, for error messages and ``--help`` (``kind``: only that kind)."""
    parts = []
    for info in _REGISTRY.values():
        if kind is None or info.kind == kind:
            alias = f" (alias {', '.join(info.aliases)})" if info.aliases else ""
            parts.append(info.form + alias)
    if plugins:
        parts.append(PLUGIN_FORM if kind is None else "package.module:Name[:ARG] (a compressor class)")
    return ", ".join(parts)


#: The steps payload mode's PowerSGD sends the dense gradient before its low-rank path
#: (torch's ``start_powerSGD_iter``; the real hook's is 2, ``hooks.powersgd_state``). None:
#: torch's 2 is the least it allows with error feedback, because DDP rebuilds its buckets in
#: the second step, and a payload has no error to feed back; those two steps are DDP's
#: start-up, which a run's throughput leaves out (``NetSenseState.in_startup``), so what
#: they send changes no number -- but their dense bytes would cost ``k`` x their transfer in
#: real time, and payload mode dilates PowerSGD's many small collectives by a large ``k``
#: (``testbed.config.factor.collective_need``: GPT-2's two dense steps at 200 Mbit/s would
#: take 84 min of a run's 4). A method option ``start_powerSGD_iter`` still sets it.
PAYLOAD_DENSE_STEPS = 0


# ----------------------------------------------------------------------------- grammar
@dataclass(frozen=True)
class MethodSpec:
    """A method string that passed the grammar (no import done yet).

    ``name``: the registered name, or ``"pkg.mod:Name"`` for a plug-in. ``text``: the string
    as written (what the run's records, folder name and worker argv carry). ``arg``: the parsed
    argument (``ratio`` / ``rank`` mirror it for built-ins); a plug-in's ``arg`` stays text
    until :func:`resolve` knows what the class declares.
    """

    name: str
    text: str
    ratio: float | None = None
    rank: int | None = None
    arg: Any = None
    info: MethodInfo | None = None  # None: a plug-in

    @property
    def plugin(self) -> bool:
        return self.info is None

    @property
    def kind(self) -> Kind | None:
        """The kind of a built-in; None for a plug-in until :func:`resolve`."""
        return None if self.info is None else self.info.kind

    @property
    def level(self) -> str:
        """The ``level`` label of the step stats (``netsenseml`` starts at ``none``)."""
        if self.info is None:
            return self.name.rpartition(":")[2].rpartition(".")[2]
        return self.info.label

    label = level

    def __str__(self) -> str:
        """The text as written: what the records, folder names and argv carry."""
        return self.text

    # What each layer asks of a method, answered from the registry (a plug-in: from what
    # it declares, after resolve; before, the answers a plug-in cannot change: False/None).
    @property
    def adaptive(self) -> bool:
        """An adaptive policy in the step loop (NetSenseML, its prototype, the peers)."""
        return self.kind == "adaptive"

    @property
    def collective(self) -> str | None:
        """A built-in compressor's collective (``allreduce`` / ``allgather``), else None."""
        return None if self.info is None else self.info.reduction

    @property
    def reference(self) -> bool:
        """DDP's own fp32 allreduce (``allreduce``, alias ``none``): no codec, the baseline."""
        return self.info is not None and self.info.reference

    @property
    def ladder(self) -> bool:
        """A fixed level the NetSenseML policy may choose (crossover, ideal schedule)."""
        return self.info is not None and self.info.ladder and not self.adaptive

    @property
    def reads_prior(self) -> bool:
        """Its policy takes the convergence prior (``netsense convergence``'s table)."""
        return self.info is not None and self.info.prior

    @property
    def takes_calibration(self) -> bool:
        """Its policy takes the registration calibration's options (``calibration_bytes``, ...)."""
        return self.info is not None and self.info.calibration

    @property
    def momentum_correction(self) -> bool:
        """Its error feedback corrects momentum (DGC): the optimizer runs without it."""
        return self.info is not None and self.info.memory == "momentum"

    @property
    def needs_values(self) -> bool:
        """Its decisions read gradient values (Accordion): recorded / payload cannot host it."""
        return self.info is not None and self.info.needs_values

    @property
    def payload_hook(self) -> bool:
        """A hook with a payload-mode stand-in at its real sizes (PowerSGD)."""
        return self.info is not None and self.info.payload_hook

    @property
    def dense_steps(self) -> int:
        """The first steps a hook sends the dense gradient (PowerSGD: 2)."""
        return 0 if self.info is None else self.info.dense_steps

    @property
    def payload_dense_steps(self) -> int:
        """The dense steps a hook sends first in payload mode: none
        (:data:`PAYLOAD_DENSE_STEPS` says why)."""
        return min(self.dense_steps, PAYLOAD_DENSE_STEPS)

    def planned_levels(self, steps: int, samples_per_step: int) -> list[MethodSpec] | None:
        """What an adaptive policy sends each step, as fixed methods (:func:`at_level`),
        where its rule plans it without the network's answer (``MethodInfo.plan``: the
        prototype's descent from its start), for an estimate of a run's time; None for every
        other method."""
        if self.info is None or self.info.plan is None:
            return None
        plan = import_target(self.info.plan, self.text)
        return [at_level(d.level, d.ratio)
                for d in plan(steps, samples_per_step, **self.info.options)]

    @property
    def collectives(self) -> int:
        """The collectives a bucket takes a step (PowerSGD 3; a plug-in is taken as 1)."""
        return 1 if self.info is None else self.info.collectives

    @property
    def topk_ratio(self) -> float | None:
        """The kept fraction of a method sending a top-k selection (top-k, DGC): it converges
        and is validated as top-k at this ratio; None for any other method."""
        return self.ratio if self.info is not None and self.info.topk else None

    @property
    def calibrated(self) -> bool:
        """The simulation's calibration keeps its runs' compute per chosen level (NetSenseML)."""
        return self.info is not None and self.info.calibrated

    @property
    def wire(self) -> float | None:
        """Wire bytes relative to fp32 (the ratio applied); None where the registry has none
        (PowerSGD, adaptive methods, plug-ins)."""
        if self.info is None or self.info.wire is None or self.adaptive:
            return None
        return self.info.wire * self.ratio if self.ratio is not None else self.info.wire

    @property
    def level_key(self) -> str | None:
        """Its key as a ladder level (``allreduce`` -> ``none``, ``topk:0.01`` stays: the
        convergence table's keys); None for a method that is not a fixed ladder level."""
        if not self.ladder:
            return None
        return f"{self.label}:{self.ratio:g}" if self.ratio is not None else self.label

    def codecs(self) -> tuple[MethodSpec, ...]:
        """The compressors its hook can run, as the host timing times them: an adaptive
        method's :data:`ADAPTIVE_CODECS`, a compressor itself (none for ``allreduce``), a
        hook none (PowerSGD, a plug-in hook: the pacer holds no codec of theirs)."""
        if self.adaptive:
            return _adaptive_codecs()
        if self.kind == "compressor" and not self.reference:
            return (self,)
        return ()


@functools.cache
def _ladder_specs() -> tuple[MethodSpec, ...]:
    return tuple(at_level(i.label) for i in ladder())


@functools.cache
def _adaptive_codecs() -> tuple[MethodSpec, ...]:
    return tuple(parse(c) for c in ADAPTIVE_CODECS)


def _bad(text: object, why: str | None, kind: Kind | None) -> ValueError:
    """One line naming the string and the accepted forms; ``why=None``: an unknown name."""
    label = "compressor spec" if kind == "compressor" else "method"
    if why is None:
        return ValueError(f"unknown {label} {text!r}; accepted: {forms(kind)}")
    return ValueError(f"invalid {label} {text!r}: {why}; accepted: {forms(kind)}")


def parse_arg(kind_name: str, text: str) -> Any:
    """Parses and bounds ``text`` as an :data:`ARG_KINDS` value; ValueError without context."""
    kind = ARG_KINDS[kind_name]
    try:
        value = kind.parse(text)
        good = kind.ok(value)
    except ValueError:
        good = False
    if not good:
        raise ValueError(f"{kind.symbol} must satisfy {kind.rule}, got {text!r}")
    return value


def parse(text: object, kind: Kind | None = None) -> MethodSpec:
    """Checks a method string against the grammar (module docstring), importing nothing.

    ``kind="compressor"`` also refuses methods that are not compressors (``compress.get``).
    A ValueError is one line naming the string and the accepted forms.
    """
    if isinstance(text, MethodSpec):  # parsed where it entered: the spec is the value carried
        if kind is not None and text.kind != kind:
            raise _bad(text.text, f"{text.name} is not a {kind}", kind)
        return text
    if not isinstance(text, str):
        raise _bad(text, "not a string", kind)
    stripped = text.strip()
    head, sep, arg = stripped.partition(":")
    key = head.lower()
    name = _ALIASES.get(key, key)
    info = _REGISTRY.get(name)
    if info is not None:
        if kind is not None and info.kind != kind:
            raise _bad(text, f"{name} is not a {kind}", kind)
        if info.arg is None:
            if sep:
                raise _bad(text, f"{name} takes no argument", kind)
            return MethodSpec(name, text, info=info)
        if not sep:
            raise _bad(text, f"{name} needs an argument: {info.form}", kind)
        try:
            value = parse_arg(info.arg, arg)
        except ValueError as exc:
            raise _bad(text, str(exc), kind) from None
        return MethodSpec(
            name,
            text,
            ratio=value if info.arg == "ratio" else None,
            rank=value if info.arg == "rank" else None,
            arg=value,
            info=info,
        )
    m = _PLUGIN_RE.match(stripped)
    if m is None:
        raise _bad(text, None, kind)
    if m["arg"] is not None and not m["arg"].strip():
        raise _bad(text, "empty argument after the last ':'", kind)
    return MethodSpec(f"{m['module']}:{m['attr']}", text, arg=m["arg"])


def read(text: object) -> MethodSpec | None:
    """A method read back from a file (a run folder's records, a CSV): its spec, or None for
    text no method reads (an older or damaged file), so a reader can pass over it."""
    try:
        return parse(text)
    except ValueError:
        return None


def as_spec(method: str | MethodSpec) -> MethodSpec:
    """A method entering an API that takes either (``hooks.register``, ``run_scenario``):
    a spec passes unchanged, a text is parsed here, once; the layers below take the spec."""
    return method if isinstance(method, MethodSpec) else parse(method)


def split_level(key: str) -> tuple[str, float]:
    """A ladder level key's label and kept fraction (``topk:0.01`` -> ``("topk", 0.01)``,
    ``fp16`` -> ``("fp16", 1.0)``); a ValueError for a ratio that is no number."""
    label, _, arg = key.partition(":")
    return label, float(arg) if arg else 1.0


def level_spec(key: str) -> MethodSpec:
    """The method that measures the ladder level ``key`` (``none`` -> ``allreduce``,
    ``topk:0.01`` -> ``topk:0.01``); a ValueError naming the key and the levels."""
    label, sep, arg = key.partition(":")
    for info in ladder():
        if info.label == label:
            return parse(f"{info.name}{sep}{arg}")
    raise ValueError(f"unknown level {key!r}; accepted: "
                     f"{', '.join(i.label for i in ladder())} (top-k as topk:R)")


def at_level(label: str, ratio: float = 1.0) -> MethodSpec:
    """The fixed method that sends what an adaptive decision of ``label`` (a ladder level's
    label: ``none``, ``fp16``, ``int8``, ``topk``) at ``ratio`` sends, built without a parse:
    ``("none", 1)`` -> ``allreduce``, ``("topk", 0.01)`` -> ``topk:0.01`` (ratio to 6
    significant digits, as its text); a KeyError for a label that is no ladder level."""
    for info in ladder():
        if info.label == label:
            if info.arg != "ratio":
                return MethodSpec(info.name, info.name, info=info)
            text = f"{info.name}:{ratio:.6g}"
            value = float(f"{ratio:.6g}")
            return MethodSpec(info.name, text, ratio=value, arg=value, info=info)
    raise KeyError(f"no ladder level labelled {label!r}")


def check(text: object) -> str:
    """Validates ``text`` (grammar only: plug-ins are not imported); returns it unchanged."""
    parse(text)
    return text  # type: ignore[return-value]


# ----------------------------------------------------------------------------- resolving
@dataclass(frozen=True)
class Resolved:
    """What a method string names, imported: ``obj`` is a class or a function.

    For a plug-in, ``info`` is built from what the class declares (``name``, ``lossy``,
    ``reduction``, ``memory``, ``arg``) or, for a hook function, from its name.
    """

    spec: MethodSpec
    info: MethodInfo
    obj: Any
    arg: Any = None

    @property
    def kind(self) -> Kind:
        return self.info.kind

    def build(self, **options: Any) -> Any:
        """Constructs the compressor or policy (``options`` after the registered ones)."""
        kwargs = {**self.info.options, **options}
        try:
            made = self.obj(**kwargs) if self.arg is None else self.obj(self.arg, **kwargs)
        except (TypeError, ValueError) as exc:  # e.g. an unknown keyword, a bad bound
            raise ValueError(f"invalid method {self.spec.text!r}: {_one_line(exc)}") from None
        if self.info.kind == "compressor":
            _check_compressor(self.spec.text, made)
        return made


def _one_line(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}".rstrip(": ")


def check_findable(text: str) -> MethodSpec:
    """:func:`parse`, and for a plug-in ``pkg.mod:Name`` that its module can be found on the
    Python path, without importing it (its import may need torch): what a scenario's
    validation checks, as for model plug-ins, so a misspelled path is refused before any
    worker starts. A ValueError is one line."""
    spec = parse(text)
    if spec.plugin:
        module = spec.name.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            raise ValueError(f"invalid method {text!r}: module {module!r} not found on the "
                             "Python path (PYTHONPATH)")
    return spec


def import_target(target: str, text: str) -> Any:
    """Imports ``"module:attr.sub"``; a ValueError says in one line what failed."""
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # any failure of a user's module is reported the same way
        raise ValueError(
            f"invalid method {text!r}: cannot import {module_name!r} ({_one_line(exc)}); "
            "is its folder on PYTHONPATH?"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"invalid method {text!r}: {module_name!r} has no {attr!r}") from None
    return obj


def resolve(spec: MethodSpec | str) -> Resolved:
    """Imports what ``spec`` names and checks that it is a compressor class or a comm hook."""
    if isinstance(spec, str):
        spec = parse(spec)
    if spec.info is not None:
        return Resolved(spec, spec.info, import_target(spec.info.target, spec.text), spec.arg)
    obj = import_target(spec.name, spec.text)
    if inspect.isclass(obj):
        return _resolve_compressor(spec, obj)
    if callable(obj):
        if spec.arg is not None:
            raise ValueError(f"invalid method {spec.text!r}: a comm hook takes no argument")
        try:
            n_params = len(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            n_params = 2
        if n_params != 2:
            raise ValueError(
                f"invalid method {spec.text!r}: a comm hook takes (state, bucket), "
                f"{spec.name} takes {n_params} parameters"
            )
        info = MethodInfo(spec.level, "hook", spec.name, "plug-in comm hook", lossy=False)
        return Resolved(spec, info, obj)
    raise ValueError(
        f"invalid method {spec.text!r}: {spec.name} is neither a compressor class nor a comm hook"
    )


def load(text: str) -> Resolved:
    """:func:`parse` + :func:`resolve`, and a compressor built once to check its properties.

    What the worker runs on ``--method`` before it starts: a plug-in that cannot be
    imported or is no compressor / comm hook is a one-line ValueError.
    """
    resolved = resolve(parse(text))
    if resolved.kind == "compressor":
        resolved.build()
    return resolved


def _resolve_compressor(spec: MethodSpec, cls: type) -> Resolved:
    arg_kind = getattr(cls, "arg", None)
    arg = spec.arg
    if arg_kind is not None:
        if arg_kind not in ARG_KINDS:
            raise ValueError(
                f"invalid method {spec.text!r}: {spec.name}.arg must be one of {sorted(ARG_KINDS)}"
            )
        if arg is None:
            raise ValueError(
                f"invalid method {spec.text!r}: {spec.name} needs an argument "
                f"({ARG_KINDS[arg_kind].symbol}, {ARG_KINDS[arg_kind].rule})"
            )
        try:
            arg = parse_arg(arg_kind, arg)
        except ValueError as exc:
            raise ValueError(f"invalid method {spec.text!r}: {exc}") from None
    for member in ("compress", "decompress"):
        if not callable(getattr(cls, member, None)):
            raise ValueError(
                f"invalid method {spec.text!r}: {spec.name} is a class without {member}(); "
                "a compressor needs compress, decompress, lossy, reduction (see PLUGINS.md)"
            )
    memory = getattr(cls, "memory", "residual")
    if memory not in ("residual", "momentum"):
        raise ValueError(f"invalid method {spec.text!r}: memory must be 'residual' or 'momentum'")
    info = MethodInfo(
        str(getattr(cls, "name", spec.level)),
        "compressor",
        spec.name,
        "plug-in compressor",
        arg=arg_kind,
        lossy=bool(getattr(cls, "lossy", False)),
        reduction=getattr(cls, "reduction", None),
        memory=memory,
    )
    return Resolved(spec, info, cls, arg)


def _check_compressor(text: str, c: Any) -> None:
    """What the hooks rely on, checked once on the instance (attributes may be set in __init__)."""
    reduction = getattr(c, "reduction", None)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"invalid method {text!r}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not isinstance(getattr(c, "lossy", None), bool):
        raise ValueError(f"invalid method {text!r}: the compressor must declare lossy = True/False")
    if reduction == "allreduce" and not getattr(c, "dense", False) and not callable(
        getattr(c, "accumulate", None)
    ):
        raise ValueError(
            f"invalid method {text!r}: an allreduce compressor needs accumulate(payload, out) "
            "(or dense = True)"
        )


METHOD_FORMS = forms()
"""The accepted method forms (built-ins registered at import time, plus plug-ins)."""

# The adaptive codecs parsed once, when the registry is complete: every spec's ``codecs()``
# is then an answer, never a parse below where the method entered.
_adaptive_codecs()
