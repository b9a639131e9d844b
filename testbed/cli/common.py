"""What every ``netsense`` command shares: the error line, deprecation notes, option types.

One error style for the whole command line: ``error: <what> `` on stderr, exit 2 for bad
input, whether the command itself refuses the input or the argument parser does
(``testbed.cli.app.main`` reformats the parser's usage errors the same way), and the
training worker (``python -m workloads.train``) prints the same form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from testbed.common import bounded

EXIT_BAD_INPUT = 2
DEFAULT_RESULTS = Path("results")

#: ``--results/-r``: the same option, the same meaning, on every command that reads or
#: writes run folders.
ResultsOption = Annotated[Path, typer.Option(
    "--results", "-r", metavar="DIR", help="results folder: runs are written to and read from here")]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="PATH=VALUE", help="override a scenario field: dotted.path=value (YAML value); repeatable")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr and exit; the contract for bad input."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def deprecated(old: str, new: str) -> None:
    """One line on stderr for an old option spelling that still works."""
    typer.echo(f"note: {old} is deprecated; use {new}", err=True)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set a.b=value`` items as {dotted path: YAML-parsed value}."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            fail(f"--set {item!r}: expected dotted.path=value")
        key, raw = item.split("=", 1)
        if len(raw.encode()) > MAX_SET_BYTES:
            fail(f"--set {key.strip()}: value longer than {MAX_SET_BYTES} bytes")
        try:  # values are YAML under the same bounds as files; non-YAML text stays a string
            out[key.strip()] = bounded.parse_yaml(raw, f"--set {key.strip()}")
        except bounded.BoundError as exc:
            if "YAML syntax error" not in str(exc):
                fail(str(exc))
            out[key.strip()] = raw
    return out


MAX_SET_BYTES = 64 * 1024
