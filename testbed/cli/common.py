"""What every ``netsense`` command shares: the error line, deprecation notes, option types.

One error style for the whole command line: ``error: <what> `` on stderr, exit 2 for bad
input, whether the command itself refuses the input or the argument parser does
(``testbed.cli.app.main`` reformats the parser's usage errors the same way), and the
training worker (``python -m workloads.train``) prints the same form.
"""

from __future__ import annotations

import shutil
import sys
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


def preflight() -> None:
    """Refuse (exit 2) before building anything when this machine cannot emulate; enter
    the rootless mode when this user may not create interfaces here.

    Rootless: the process replaces itself with the same command inside its own user +
    network + mount namespace (testbed.emulation.rootless) and comes back here, inside.
    """
    from testbed.emulation import leftovers, rootless

    mode = rootless.choose_mode()
    if mode.name == "none":
        fail(f"cannot emulate here: {mode.detail}; to fix: {mode.fix} (see `netsense doctor`)")
    for tool in ("mnexec", "iperf3", "tc", "ip"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found; see `netsense doctor`")
    if mode.name == "rootless" and not rootless.in_namespace():
        try:
            state_dir = leftovers.default_state_dir()
            leftovers.ensure_own_dir(state_dir)
        except OSError as exc:
            fail(str(exc))
        rootless.reexec(sys.argv[1:], state_dir)
    if rootless.in_namespace():
        try:
            rootless.prepare_namespace()
        except OSError as exc:
            fail(str(exc))
