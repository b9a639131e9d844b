"""An own job (a scenario's ``workload.command``) run in a process forked from the zygote,
as ``python ARGV`` would run it in a fresh interpreter.

Why: a fresh interpreter pays torch's imports (~1 s) and ``torch._dynamo``'s (~1 s more,
DDP's constructor imports it) before ``hooks.register``; two ranks starting together on a
2-core machine pay that twice over the two cores, 3-4 s per run that the built-in worker,
forked from the pre-imported zygote, does not pay. A fork of the zygote (which has imported
torch, dynamo, DDP and netsenseml, and nothing of the job) runs the job's code with those
imports already done; every other import is the job's own.

What ``python ARGV`` does at start and :func:`run` repeats (ARGV: ``script.py args``,
``-m module args`` or ``-c code args``): ``sys.argv`` (``script.py``, the module's file,
``-c``), ``sys.path`` (the script's folder, the working directory for ``-m``, ``''`` for
``-c``; then the job's ``PYTHONPATH``; then the interpreter's own entries), a new
``__main__`` module, the thread count torch takes from ``OMP_NUM_THREADS``, and at the end
what the interpreter's exit does: an uncaught exception through ``sys.excepthook`` (exit 1),
``SystemExit``'s code, the non-daemon threads joined, the ``atexit`` handlers, the streams
flushed. Python's ``random`` reseeds itself in a forked child; numpy's global generator is
reseeded here (a fresh interpreter seeds it from the OS).

Where a fork cannot be the same as a fresh interpreter, the child replaces itself with one
(``os.execv``, already in its host, session, folder and log; :func:`fresh_reason` says why
on the job's stderr): a ``PYTHON*`` variable of the job's environment other than
``PYTHONPATH`` that differs from the zygote's (``PYTHONHASHSEED``, ``PYTHONWARNINGS`` ...:
read once at interpreter start), a ``TORCH*``/``KMP_``/``LD_`` variable that differs
(read when torch is imported), or a module the zygote imported that the job's path would
find elsewhere (a ``torch`` or ``netsenseml`` of the job's own). Not repeated: the string
hash seed, which forked ranks share (a fresh interpreter draws one per process). The fresh
interpreter runs this module as its script (``python job_runner.py ARGV``, :func:`main`), which
runs the job as :func:`run` does and leaves as below; so does a job started without the
zygote (``NETSENSE_ZYGOTE=0``).

How the job leaves (``netsenseml.lifecycle``): a script that simply returns ends through
``os._exit`` after its ``atexit`` handlers (the zygote's child, :func:`main`), so the
interpreter's finalization, where gloo's threads race it (SIGABRT), never runs; a script that
ends with ``dist.destroy_process_group()`` gets the drained, bounded destroy
(``lifecycle.patch_destroy``, installed here before the script runs when torch is already
imported, else by ``hooks.register``). Every thread's Python stack is written to
``$NETSENSE_STACK_FILE`` on ``lifecycle.STACK_SIGNAL``: the testbed asks a rank still running
at its deadline where it is.
"""

from __future__ import annotations

import atexit
import builtins
import faulthandler
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import threading
import types
from collections.abc import Mapping
from typing import NoReturn

#: Variables read once when the interpreter or torch starts: a job that sets one of them
#: to another value than the zygote's runs as a fresh interpreter (module docstring).
STARTUP_PREFIXES = ("PYTHON", "TORCH", "KMP_", "LD_", "CUDA_LAUNCH", "MALLOC_")
#: ... except these: applied by :func:`run` in the fork (``PYTHONPATH``; stdout is
#: unbuffered in the zygote and every job alike), or read only when the job asks
#: (torchrun's ``TORCHELASTIC_*``, which the testbed sets in every rank: elastic's
#: restarts and error files, never at import).
APPLIED = ("PYTHONPATH", "PYTHONUNBUFFERED", "TORCHELASTIC_")


def _python_path(env: Mapping[str, str]) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def job_path(argv: list[str], env: Mapping[str, str], base: list[str], cwd: str) -> list[str]:
    """``sys.path`` of ``python ARGV`` started with ``env`` in ``cwd``: its first entry,
    the job's ``PYTHONPATH``, then ``base`` (the interpreter's own entries), without
    repeats (as ``site`` leaves it)."""
    if argv[0] == "-c":
        first = ""
    elif argv[0] == "-m":
        first = cwd
    else:
        first = os.path.dirname(os.path.realpath(argv[0]))
    head = [] if env.get("PYTHONSAFEPATH") else [first]
    out: list[str] = []
    for p in [*head, *_python_path(env), *base]:
        if p not in out:
            out.append(p)
    return out


def interpreter_entries(path: list[str], env: Mapping[str, str]) -> list[str]:
    """The zygote's ``sys.path`` less its first entry and its own ``PYTHONPATH``'s: what
    every interpreter of this installation starts with (stdlib, site-packages)."""
    own = set(_python_path(env))
    return [p for p in path[1:] if p not in own]


def fresh_reason(env: Mapping[str, str], zygote_env: Mapping[str, str],
                 path: list[str]) -> str | None:
    """Why this job must run as a fresh interpreter (module docstring), or None."""
    for key in sorted(set(env) | set(zygote_env)):
        if key.startswith(STARTUP_PREFIXES) and not key.startswith(APPLIED) and \
                env.get(key) != zygote_env.get(key):
            return f"{key} differs from the pre-imported interpreter's"
    for name, mod in sorted(sys.modules.items()):
        if "." in name or mod is None:
            continue
        loaded = getattr(mod, "__file__", None)
        if loaded is None:
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        except (ImportError, ValueError):
            spec = None
        found = None if spec is None else spec.origin
        if found is not None and os.path.realpath(found) != os.path.realpath(loaded):
            return f"the job's path finds its own {name!r} ({found})"
    return None


def _new_main(file: str | None) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __spec__=None, __cached__=None)
    if file is not None:
        main.__file__ = file
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", file)
    sys.modules["__main__"] = main
    return main


def _execute(argv: list[str]) -> None:
    """The job's code in a new ``__main__`` (``sys.argv`` as ``python ARGV`` sets it)."""
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]  # runpy puts the module's file first
        _new_main(None)
        runpy._run_module_as_main(argv[1], alter_argv=True)  # what `python -m` runs
        return
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        code = compile(argv[1], "<string>", "exec")
        exec(code, _new_main(None).__dict__)  # noqa: S102 - the job's own code, as python -c
        return
    sys.argv = list(argv)
    with io.open_code(argv[0]) as fh:
        code = compile(fh.read(), argv[0], "exec")
    exec(code, _new_main(argv[0]).__dict__)  # noqa: S102 - the job's own script


def _job_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A traceback from the job's first frame on (this module's frames left out)."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _threads() -> None:
    """What torch read from ``OMP_NUM_THREADS`` when the zygote imported it, redone."""
    torch = sys.modules.get("torch")
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    if torch is not None and text.isdigit() and int(text) > 0:
        torch.set_num_threads(int(text))
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()  # from the OS, as a fresh interpreter's numpy


def _safe_endings() -> None:
    """``destroy_process_group`` made safe before the job's code runs (module docstring),
    with the zygote's own ``netsenseml`` (never imported here: a fresh interpreter imports
    nothing before the job's path is set)."""
    lifecycle = sys.modules.get("netsenseml.lifecycle")
    if lifecycle is not None and "torch.distributed" in sys.modules:
        lifecycle.patch_destroy()


#: ``netsenseml.lifecycle.STACK_SIGNAL``, repeated: :func:`main` must not import netsenseml
#: before the job's path is set (tests/workloads check that the two agree).
STACK_SIGNAL = signal.SIGWINCH


def stacks_on_signal() -> None:
    """Every thread's stack to ``$NETSENSE_STACK_FILE`` on :data:`STACK_SIGNAL`."""
    target = os.environ.get("NETSENSE_STACK_FILE", "").strip()
    if target:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        faulthandler.register(STACK_SIGNAL, file=fd, all_threads=True, chain=False)


def run(argv: list[str], zygote_env: Mapping[str, str], zygote_path: list[str],
        *, fresh: bool = False) -> int:
    """Run the job ``python ARGV`` in this (forked) process; returns its exit code. The
    environment and working directory are the job's already; ``zygote_env`` and
    ``zygote_path`` are the zygote's own, from before the fork (``fresh``: this process is
    a fresh interpreter already, :func:`main`). A negative code: the signal the process
    must end by (an uncaught ``KeyboardInterrupt``)."""
    env = os.environ
    path = job_path(argv, env, interpreter_entries(zygote_path, zygote_env), os.getcwd())
    why = None if fresh else fresh_reason(env, zygote_env, path)
    if why is not None:
        print(f"netsense: the job starts as a fresh interpreter: {why}", file=sys.stderr,
              flush=True)
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), *argv])
    sys.path[:] = path
    sys.orig_argv = [sys.executable, *argv]
    _threads()
    _safe_endings()
    code = 0
    try:
        _execute(argv)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter does
        tb = _job_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        # python ends itself by SIGINT after an uncaught Ctrl-C, else exits 1
        code = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    threading._shutdown()  # type: ignore[attr-defined] - the interpreter's exit joins them
    atexit._run_exitfuncs()
    return code


def leave(code: int) -> NoReturn:
    """End the process with the job's ``code`` without the interpreter's finalization
    (module docstring): the streams flushed, a negative code as its signal."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code < 0:  # ended by a signal (Ctrl-C), as python would be
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def main() -> NoReturn:
    """``python job_runner.py ARGV``: the job in this fresh interpreter (module docstring)."""
    stacks_on_signal()
    leave(run(sys.argv[1:], dict(os.environ), list(sys.path), fresh=True))


if __name__ == "__main__":
    main()
