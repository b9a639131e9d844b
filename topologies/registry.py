"""The topology registry: ``kind`` -> topology class, built-ins and plug-ins alike.

A scenario's ``topology.kind`` is either a registered name (below: one line per built-in
topology) or an import path ``package.module:Class`` naming a user's topology, the way
``mn --custom`` takes a file. Either way the class is a ``topologies.base.NamedTopo``
subclass carrying ``Params`` (a ``topologies.spec.TopologyParams`` model of its build()
arguments); see topologies/PLUGINS.md for a complete example.

``parse()`` is what the scenario schema calls: it resolves the kind and validates the rest
of the mapping against the class's ``Params``, raising a pydantic ``ValidationError``
whose locations are fields of the topology (``kind``, ``n_workers``...), so the schema
reports ``topology.<field>: ...`` in one line. Everything a plug-in must satisfy (the
module imports, the class is a NamedTopo with a Params model, build() accepts each of its
fields and ``prefix``) is checked here, before anything is built.

Resolving a kind imports the topology's module and so Mininet's Python package (never
torch, never root).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from topologies.spec import NAMESPACE_FIELDS, TopologyParams

_BUILTIN: dict[str, str] = {}


def register(kind: str, path: str) -> None:
    """Make ``kind`` name the topology class at ``path`` (``package.module:Class``)."""
    if ":" in kind or not kind:
        raise ValueError(f"topology kind {kind!r}: a registered name has no ':'")
    _BUILTIN[kind] = path


register("star", "topologies.star:StarTopo")
register("dumbbell", "topologies.dumbbell:DumbbellTopo")
register("leafspine", "topologies.leafspine:LeafSpineTopo")
register("hosts", "topologies.hosts:HostsTopo")  # real machines: docs/real-hosts.md


class TopologyKindError(ValueError):
    """A kind that names no usable topology; ``str()`` is one line (without the field)."""


def kinds() -> list[str]:
    """The registered names, in registration order."""
    return list(_BUILTIN)


def is_plugin(kind: str) -> bool:
    return ":" in kind


def allowed_text() -> str:
    return ", ".join(repr(k) for k in _BUILTIN) + " or a plug-in package.module:Class"


def topo_class(kind: str) -> type:
    """The NamedTopo subclass ``kind`` names, checked to be usable (module doc)."""
    if not isinstance(kind, str):
        raise TopologyKindError(f"must be a string: {allowed_text()}")
    if kind in _BUILTIN:
        path = _BUILTIN[kind]
    elif is_plugin(kind):
        path = kind
    else:
        raise TopologyKindError(f"must be {allowed_text()}")
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise TopologyKindError("not package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's one line
        raise TopologyKindError(
            f"cannot import {module_name!r} ({type(exc).__name__}: {exc}); put its folder on "
            "PYTHONPATH") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise TopologyKindError(f"module {module_name!r} has no attribute {attr!r}")
    _check_class(cls)
    return cls


def _check_class(cls: Any) -> None:
    from topologies.base import NamedTopo  # Mininet's Python package, imported on use

    if not (inspect.isclass(cls) and issubclass(cls, NamedTopo)):
        raise TopologyKindError("not a topologies.base.NamedTopo subclass")
    params = getattr(cls, "Params", None)
    if not (inspect.isclass(params) and issubclass(params, TopologyParams)):
        raise TopologyKindError(
            "the class has no Params (a topologies.spec.TopologyParams subclass)")
    sig = inspect.signature(cls.build)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    accepted = set(sig.parameters) - {"self"}
    missing = [f for f in params.model_fields
               if f != "kind" and f not in NAMESPACE_FIELDS and f not in accepted]
    if not takes_any and ("prefix" not in accepted or missing):
        what = ", ".join(missing) if missing else "prefix"
        raise TopologyKindError(f"its build() does not accept {what}")


def params_class(kind: str) -> type[TopologyParams]:
    return topo_class(kind).Params


def parse(data: Mapping[str, Any]) -> TopologyParams:
    """Validate a topology mapping; errors are located at its fields (module doc)."""
    if isinstance(data, TopologyParams):
        return data
    if not isinstance(data, Mapping):
        raise _error((), "must be a mapping with a kind", data)
    if "kind" not in data:
        detail = InitErrorDetails(type="missing", loc=("kind",), input=dict(data))
        raise ValidationError.from_exception_data("topology", [detail])
    try:
        params = params_class(data["kind"])
    except TopologyKindError as exc:
        raise _error(("kind",), str(exc), data["kind"]) from None
    return params.model_validate(dict(data))


def _error(loc: tuple[str, ...], message: str, value: Any) -> ValidationError:
    detail = InitErrorDetails(type=PydanticCustomError("topology", message), loc=loc,
                              input=value)
    return ValidationError.from_exception_data("topology", [detail])


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its local ``$defs`` references inlined: each variant is embedded in
    the scenario's schema, where its own ``#/$defs/...`` would point nowhere."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
                return walk(dict(defs[ref[8:]]))
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def json_schema() -> dict[str, Any]:
    """JSON schema of a topology mapping: one variant per registered kind (its Params with
    ``kind`` fixed), and a plug-in variant whose fields only its own class knows."""
    variants: list[dict[str, Any]] = []
    for kind in _BUILTIN:
        schema = _inline_defs(params_class(kind).model_json_schema())
        summary = (params_class(kind).__doc__ or "").strip().splitlines()[0]
        schema["properties"]["kind"] = {"const": kind, "description": f"{kind}: {summary}"}
        variants.append(schema)
    variants.append({
        "title": "plug-in topology", "type": "object", "required": ["kind"],
        "properties": {"kind": {"type": "string", "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
                                "description": "package.module:Class"}},
        "additionalProperties": True,
    })
    return {"oneOf": variants}


def rate_of(topology: Mapping[str, Any]) -> float | None:
    """The nominal rate of a topology as stored in a run's config.json, or None when it
    cannot be read (an unknown or no longer importable kind, a field since renamed)."""
    try:
        return parse(topology).nominal_rate_mbit()
    except (ValidationError, TopologyKindError, NotImplementedError):
        return None
