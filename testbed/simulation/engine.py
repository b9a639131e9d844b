"""Importing SimGrid, and running each simulation in a process of its own.

SimGrid comes from Debian (``apt-get install python3-simgrid``: SimGrid 3.32's bindings, one
extension module in ``/usr/lib/python3/dist-packages``). ``make setup`` links that module
into the venv; where that link is missing the module is loaded from Debian's folder
directly, by file, so that the rest of Debian's Python packages never shadow the venv's.

A SimGrid ``Engine`` is a process-wide singleton that cannot be created twice, so every
simulation (one calibration point, one validated run, one worker count) runs in a fresh
child process (``run_isolated``). The children are forked: the parent never creates an
engine and starts no threads (the testbed's CLI has none), so a fork is safe and costs a
few milliseconds, where a fork server or spawn would re-import the caller's ``__main__``
(and need every script to guard it) for each of the hundreds of simulations a
calibration runs.

Importing the module makes SimGrid print one configuration line to stderr; ``load`` keeps
it off the terminal (file descriptor 2 points to /dev/null for the import only), so a
command's output is its own.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, TypeVar

DEBIAN_DIR = "/usr/lib/python3/dist-packages"
INSTALL_HINT = ("`make setup` installs it (apt-get install python3-simgrid, then links "
                "the module into the venv)")

T = TypeVar("T")
R = TypeVar("R")


class SimGridMissing(RuntimeError):
    """SimGrid's Python module cannot be imported here."""


def load() -> ModuleType:
    """The ``simgrid`` module (the venv's, else Debian's by file), or ``SimGridMissing``."""
    loaded = sys.modules.get("simgrid")
    if loaded is not None:
        return loaded
    with _quiet_stderr():
        return _import()


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _import() -> ModuleType:
    try:
        import simgrid  # noqa: PLC0415 - optional system package, imported when simulating
        return simgrid
    except ImportError:
        pass
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(glob.glob(f"{DEBIAN_DIR}/simgrid.{tag}-*.so"))
    if not found:
        raise SimGridMissing(f"simgrid: not importable and no {DEBIAN_DIR}/simgrid.{tag}-*.so; "
                             + INSTALL_HINT)
    spec = importlib.util.spec_from_file_location("simgrid", found[0])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as exc:
        raise SimGridMissing(f"simgrid: {found[0]} does not load: {exc}; {INSTALL_HINT}") from None
    sys.modules["simgrid"] = mod
    return mod


def available() -> bool:
    try:
        load()
    except SimGridMissing:
        return False
    return True


class SimulationFailed(RuntimeError):
    """A simulation's process died or raised; the message names which one and why."""


def _child(fn: Callable[[Any], Any], item: Any, conn: Any, parents: list[Any]) -> None:
    for end in parents:  # the fork's copies of the parent's reading ends: with one left
        end.close()      # open here, a parent that died would leave this send blocked
    try:
        conn.send(("ok", fn(item)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_isolated(fn: Callable[[T], R], items: Iterable[T], workers: int = 1) -> list[R]:
    """``[fn(x) for x in items]``, each call in a fresh process (one engine per process),
    at most ``workers`` at a time; a call that raises or whose process dies (SimGrid
    aborts the process on some errors) raises ``SimulationFailed`` naming its index."""
    items = list(items)
    ctx = multiprocessing.get_context("fork")
    results: list[Any] = [None] * len(items)
    running: list[tuple[int, Any, Any]] = []
    todo = list(enumerate(items))
    try:
        while todo or running:
            while todo and len(running) < max(1, workers):
                i, item = todo.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, daemon=True, args=(
                    fn, item, send, [recv, *(r for _, _, r in running)]))
                proc.start()
                send.close()
                running.append((i, proc, recv))
            ready = multiprocessing.connection.wait([r for _, _, r in running])
            for i, proc, recv in list(running):
                if recv not in ready:
                    continue
                try:
                    status, value = recv.recv()
                except EOFError:
                    proc.join()
                    raise SimulationFailed(f"simulation {i}: its process died "
                                           f"(exit {proc.exitcode}; SimGrid aborted)") from None
                proc.join()
                if status != "ok":
                    raise SimulationFailed(f"simulation {i}: {value}")
                results[i] = value
                running.remove((i, proc, recv))
    finally:
        for _, proc, _ in running:
            proc.kill()
            proc.join()
    return results


def engine_args(config: dict[str, Any]) -> list[str]:
    """Engine arguments: SimGrid's own log output off, then ``--cfg=key:value`` each."""
    return ["netsense-sim", "--log=root.thres:critical", "--log=xbt_cfg.thres:critical",
            *(f"--cfg={k}:{v}" for k, v in config.items())]
