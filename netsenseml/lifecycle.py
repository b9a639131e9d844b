"""Leaving a DDP process without the gloo exit race: ``shutdown`` and ``clean_exit``.

Why a library needs this: when a training script simply returns, CPython finalizes the
interpreter while gloo's worker threads (``ProcessGroupGloo::runLoop``) may still drop their
last reference to a finished work item. Freeing a Python-owned tensor needs the GIL; a thread
that asks for it during finalization is ended with ``pthread_exit``, whose forced unwind
crosses a ``noexcept`` C++ frame: ``terminate called without an active exception``, SIGABRT,
and torchrun reports the job FAILED although every step finished. It depends on thread
timing, so it shows on a loaded machine and rarely on an idle one.

The way out (the testbed's own worker, ``workloads.train.leave``, leaves through
``shutdown``): destroy the process group while the interpreter is whole (gloo's threads are
joined), flush what the process wrote, run the ``atexit`` handlers (trackers such as
MLflow/W&B finish there), then ``os._exit`` so interpreter finalization never runs.
After a failure the group is not destroyed: a half-built or broken group can hang there.
Destroying the group has a race of its own. A gloo thread frees a finished work item just
after its future completed, and freeing the item's tensors takes the GIL; the group's
destructor joins those threads while it holds the GIL. A rank that reaches
``destroy_process_group`` while a thread is still freeing deadlocks there (seen under load:
the rank printed its last record, then hung until the run's deadline; ``py-spy`` showed
``~ProcessGroupGloo`` in ``std::thread::join`` and a gloo thread in ``~AsyncWork`` waiting
for the GIL). So ``shutdown`` first sleeps ``DRAIN_S`` with the GIL released, which lets
those threads finish, and bounds the destroy with ``faulthandler``'s watchdog, which needs no
GIL: after ``destroy_timeout_s`` (30 s) it writes every thread's stack to stderr and ends
the process with code 1 (a Python timer thread cannot fire while the GIL is held).

Files the script opened and did not close are not flushed by ``os._exit``: close them
(``with open(...)``) inside the block.

**A script that ends as scripts do.** Most DDP scripts end with ``dist.destroy_process_group()``
(the race above, without the drain: a stranger's script hung there until the run's deadline
in 2 of 4 attempts) or simply return (the exit race). Under the testbed neither needs an edit:
:func:`patch_destroy` (installed by the job runner, ``workloads.job_runner``, before the script
runs, and by ``hooks.register`` under the testbed) makes the default group's destroy the
drained, bounded :func:`destroy_group`, after the job's records are closed (:func:`on_destroy`:
a job whose work is done is judged on its records even if the watchdog ends it); the job
runner leaves a script that returns through ``os._exit`` as :func:`shutdown` does.

**Where a hung process is.** :func:`dump_stacks_on` registers ``faulthandler`` on
:data:`STACK_SIGNAL` (SIGWINCH: ignored by default, so an early one is harmless): the testbed sends it to every rank
still running at its deadline and reads each rank's Python stack from the file (the handler
runs in the signal's C context, so it answers while the main thread waits in C++ holding the
GIL, as a hung collective or destroy does; a Python-level handler would never run).
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import functools
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _note(e: Exception) -> None:
    """A failed destroy is said on stderr, never raised: the job's work is already done."""
    print(f"netsenseml: note: destroy_process_group: {type(e).__name__}: {e}",
          file=sys.stderr, flush=True)


#: The code :func:`shutdown` is leaving with, set before the ``atexit`` handlers run (None
#: until then, and for a process that leaves another way).
exit_code: int | None = None
#: Seconds ``shutdown`` waits for ``destroy_process_group`` before it ends the process.
DESTROY_TIMEOUT_S = 30.0
#: Seconds the group's worker threads get to free their finished work items first.
DRAIN_S = 0.2
#: The signal on which a process registered by :func:`dump_stacks_on` writes every thread's
#: Python stack (module docstring). SIGWINCH because its default action is to be ignored: a
#: process asked before it installed the handler (a fresh interpreter still importing, in
#: the instant after the testbed saw the zygote's handler) goes on instead of dying, as it
#: would of a real-time signal's default. The workers have no terminal to resize.
STACK_SIGNAL = signal.SIGWINCH
#: The variable naming the file :func:`dump_stacks_on` writes to (set by the testbed).
ENV_STACK_FILE = "NETSENSE_STACK_FILE"

_before_destroy: list[Callable[[], None]] = []
_stack_fd: int | None = None


def destroy_group(timeout_s: float = DESTROY_TIMEOUT_S) -> None:
    """``destroy_process_group`` after a drain, bounded by a watchdog (module docstring); a
    no-op without a group. For scripts that destroy the group and go on living."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    # what torch.distributed holds now, but never this module's patch (it would drain twice)
    destroy = dist.destroy_process_group
    if getattr(destroy, "_netsense_safe", False):
        destroy = destroy.__wrapped__  # type: ignore[attr-defined]
    try:
        _destroy_bounded(destroy, timeout_s)
    except Exception as e:  # noqa: BLE001 - a peer that already left changes nothing now
        _note(e)


def on_destroy(fn: Callable[[], None]) -> None:
    """Call ``fn`` when the job destroys its default process group through the patched
    ``destroy_process_group`` (:func:`patch_destroy`), before the destroy: the job's records
    are closed while nothing can hang yet (``netsenseml.job``)."""
    if fn not in _before_destroy:
        _before_destroy.append(fn)


def patch_destroy() -> None:
    """``torch.distributed.destroy_process_group`` made safe for the default group (module
    docstring): the :func:`on_destroy` callbacks, then :func:`destroy_group` (drain, watchdog).
    Another group is destroyed as before. Idempotent; a name the script imported before the
    patch (``from torch.distributed import destroy_process_group`` at its top, when the
    patch comes from ``hooks.register``) keeps torch's own function."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    original = c10d.destroy_process_group
    if getattr(original, "_netsense_safe", False):
        return

    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> None:
        if group is not None and group is not c10d.GroupMember.WORLD:
            original(group)
            return
        for fn in list(_before_destroy):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a callback must not keep the group alive
                print(f"netsenseml: note: before destroy_process_group: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
        if not c10d.is_initialized():
            original(group)  # torch's own error for a group that does not exist
            return
        _destroy_bounded(original, DESTROY_TIMEOUT_S)

    destroy_process_group._netsense_safe = True  # type: ignore[attr-defined]
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group


def _destroy_bounded(destroy: Callable[[], None], timeout_s: float) -> None:
    time.sleep(DRAIN_S)
    _flush()  # the watchdog's exit skips Python's buffers
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        destroy()
    finally:
        faulthandler.cancel_dump_traceback_later()


def dump_stacks_on(path: str | os.PathLike[str] | None = None) -> bool:
    """Write every thread's Python stack to ``path`` (default: ``$NETSENSE_STACK_FILE``)
    whenever this process receives :data:`STACK_SIGNAL` (module docstring). False when no
    file is named; once per process (a second call keeps the first file)."""
    global _stack_fd
    if _stack_fd is not None:
        return True
    target = os.fspath(path) if path is not None else os.environ.get(ENV_STACK_FILE, "").strip()
    if not target:
        return False
    _stack_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    faulthandler.register(STACK_SIGNAL, file=_stack_fd, all_threads=True, chain=False)
    return True


def shutdown(code: int = 0, *, run_atexit: bool = True,
             destroy_timeout_s: float = DESTROY_TIMEOUT_S) -> NoReturn:
    """End this process with ``code``: destroy the process group (when ``code == 0``; after
    ``destroy_timeout_s`` the watchdog ends the process with code 1, module docstring),
    flush logging and stdio, run the ``atexit`` handlers, then ``os._exit(code)``."""
    if code == 0:
        try:
            destroy_group(destroy_timeout_s)
        except Exception as e:  # noqa: BLE001 - e.g. torch.distributed not importable
            _note(e)
    try:
        logging.shutdown()
    except Exception:  # noqa: BLE001 - a broken handler must not turn a clean exit into a crash
        pass
    global exit_code
    exit_code = code  # the atexit handlers may ask (netsenseml.job's summary record)
    if run_atexit:
        try:
            atexit._run_exitfuncs()
        except Exception:  # noqa: BLE001 - atexit itself reports the failing handler
            pass
    _flush()
    os._exit(code)


@contextlib.contextmanager
def clean_exit() -> Iterator[None]:
    """Run the block, then leave the process through :func:`shutdown`.

    Normal end: exit 0 (the group destroyed first). An exception: its traceback on stderr,
    exit 1 (130 for Ctrl-C; ``sys.exit(n)`` keeps ``n``). Never returns to the caller, so
    put the whole job, ``init_process_group`` included, inside it.
    """
    try:
        yield
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        shutdown(code)
    except KeyboardInterrupt:
        shutdown(130)
    except BaseException:  # noqa: BLE001 - reported, then the process ends
        traceback.print_exc()
        shutdown(1)
    shutdown(0)
