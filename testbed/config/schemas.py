"""JSON Schemas of scenario and sweep files, for editors (YAML language servers) and tools.

Generated from the pydantic models, so they cannot drift from what ``netsense run`` accepts
as far as fields, types and bounds go; the cross-field checks (links named by events exist,
a dataset fits a model, methods parse) are only in the validator. The committed copies in
testbed/schemas/ are checked against a fresh generation by the tests; ``netsense schema
scenario|sweep --write`` (or ``make schemas``) refreshes them after a model changes.

To use one in an editor: ``# yaml-language-server: $schema=<path>/scenario.schema.json`` as
the first line of a scenario file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.common.files import atomic_write_text

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
KINDS = ("scenario", "sweep")


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``scenario`` or ``sweep`` file."""
    if kind == "scenario":
        from testbed.config.scenario import Scenario as model
    elif kind == "sweep":
        from testbed.config.sweep import SweepSpec as model  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown schema {kind!r}; accepted: {', '.join(KINDS)}")
    out = model.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"NetSense {kind} file", **out}


def text(kind: str) -> str:
    """The schema as the committed file holds it (sorted keys, 2-space indent, newline)."""
    return json.dumps(schema(kind), indent=2, sort_keys=True) + "\n"


def path(kind: str) -> Path:
    return SCHEMA_DIR / f"{kind}.schema.json"


def write(kind: str) -> Path:
    p = path(kind)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, text(kind))
    return p
