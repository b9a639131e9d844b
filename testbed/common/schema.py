"""The pydantic base of every testbed input file (scenarios, sweeps) and its one-line errors.

Why strict: a misspelt field must be an error naming it, never a silently ignored default;
and the user sees one line naming the field, never pydantic's multi-line report.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Unknown fields are refused (``topology.colour: unknown field``); so are inf and NaN,
    which pass ``gt=0`` but no consumer can use (tc, iperf3, the timeline's sleeps)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)


def one_line(exc: ValidationError, tags: Iterable[str] = ()) -> str:
    """The first error of a ValidationError as ``path: message (got X)``.

    ``path`` reads as written in the file (``timeline[0].rate_mbit``); ``tags`` are the
    discriminator values pydantic puts into the location of a tagged union (left out).
    """
    err = exc.errors(include_url=False)[0]
    skip = set(tags)
    loc = ""
    for part in err.get("loc", ()):
        if isinstance(part, int):
            loc += f"[{part}]"
        elif part not in skip:
            loc += f".{part}" if loc else str(part)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
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
