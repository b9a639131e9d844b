"""Field names of scenario and sweep files: the naming convention, the renames, suggestions.

Convention (one pattern a user can guess): rates end in ``_mbit`` (Mbit/s), durations and
instants in ``_s`` (seconds), sizes in ``_pkts``, small times in ``_ms``. Fields named before
the convention existed keep working: ``apply_renames`` rewrites the *raw* mapping (as read
from YAML, before validation) and says once per old name, on stderr, which name replaces it.
Doing it on the raw mapping keeps the pydantic models free of aliases, so their JSON schema
(``netsense schema``) shows only the current names and an editor flags the old ones.

Override paths (``--set``, sweep ``grid``/``overrides``) are dotted versions of the same
names and go through ``rename_path``.

``suggest`` gives the "did you mean" for an unknown field: the closest name (difflib) among
the fields valid at that place of the file, found by walking the pydantic models along the
error's location, so it stays right when a topology or event kind is added.
"""

from __future__ import annotations

import difflib
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

#: (where, old, new, only for this event ``kind`` or None). ``where`` is ``""`` for the top
#: level of a scenario and ``"timeline[]"`` for every item of its timeline.
RENAMES: tuple[tuple[str, str, str, str | None], ...] = (
    ("", "probe_seconds", "probe_s", None),
    ("timeline[]", "at", "at_s", None),
    ("timeline[]", "mbit", "rate_mbit", "set_rate"),
)

_said: set[tuple[str, str]] = set()


def _note(old: str, new: str, where: str, label: str, log: Callable[[str], None] | None) -> None:
    """One line per old name and process (a sweep loads the same file hundreds of times)."""
    if (old, new) in _said:
        return
    _said.add((old, new))
    msg = (f"note: {label}{where}{old!r} is deprecated; it is read as {new!r} "
           "(rename it in the file)")
    (log or (lambda m: print(m, file=sys.stderr)))(msg)


def apply_renames(data: Mapping[str, Any], label: str = "",
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A copy of a raw scenario mapping with old field names replaced by current ones.

    When both the old and the new name are given, the new one wins and the old one is left
    for validation to refuse as an unknown field (a silent choice would hide a mistake).
    """
    out = dict(data)
    prefix = f"{label}: " if label else ""
    for where, old, new, kind in RENAMES:
        if where == "":
            if old in out and new not in out:
                out[new] = out.pop(old)
                _note(old, new, "", prefix, log)
        elif where == "timeline[]" and isinstance(out.get("timeline"), list):
            items = []
            for i, ev in enumerate(out["timeline"]):
                if (isinstance(ev, Mapping) and old in ev and new not in ev
                        and (kind is None or ev.get("kind") == kind)):
                    ev = {(new if k == old else k): v for k, v in ev.items()}
                    _note(old, new, f"timeline[{i}]: ", prefix, log)
                items.append(ev)
            out["timeline"] = items
    return out


def rename_path(dotted: str, log: Callable[[str], None] | None = None) -> str:
    """An override path with old field names replaced: ``timeline.0.at`` -> ``timeline.0.at_s``.

    The event kind is not known from the path alone, so ``timeline.N.mbit`` is renamed for
    any kind: only ``set_rate`` ever had a field called ``mbit``.
    """
    parts = dotted.split(".")
    for where, old, new, _kind in RENAMES:
        if where == "" and parts[0] == old:
            parts[0] = new
            _note(old, new, "", f"--set/override {dotted!r}: ", log)
        elif (where == "timeline[]" and len(parts) == 3 and parts[0] == "timeline"
              and parts[2] == old):
            parts[2] = new
            _note(old, new, "", f"--set/override {dotted!r}: ", log)
    return ".".join(parts)


# --------------------------------------------------------------------------- did you mean


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model class inside an annotation (Union, Optional, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return models_in(typing.get_args(annotation)[0])
    if origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            out += models_in(arg)
    return out


def kind_tag(model: type[BaseModel]) -> str | None:
    """The literal ``kind`` a variant of a tagged union declares, or None."""
    field = model.model_fields.get("kind")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if len(args) == 1 else None


_models_in, _tag = models_in, kind_tag  # deprecated names


def fields_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names valid where ``loc`` (a pydantic error location, without its last part)
    points, walking from ``root``; discriminator tags in the location pick the union member.
    """
    cands = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in cands:
            if part in m.model_fields:
                nxt += models_in(m.model_fields[part].annotation)
        if not nxt:  # a tag pydantic put into the path: keep the member it names
            nxt = [m for m in cands if kind_tag(m) == part]
        if not nxt:
            return []
        cands = nxt
    names: dict[str, None] = {}
    for m in cands:
        names.update(dict.fromkeys(m.model_fields))
    return list(names)


def suggest(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``"; did you mean 'x'?"`` for the unknown field at ``loc``, or ``""``."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], fields_at(root, loc[:-1]), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
