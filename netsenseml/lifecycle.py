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
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import NoReturn


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


def destroy_group(timeout_s: float = DESTROY_TIMEOUT_S) -> None:
    """``destroy_process_group`` after a drain, bounded by a watchdog (module docstring); a
    no-op without a group. For scripts that destroy the group and go on living."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    time.sleep(DRAIN_S)
    _flush()  # the watchdog's exit skips Python's buffers
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - a peer that already left changes nothing now
        _note(e)
    finally:
        faulthandler.cancel_dump_traceback_later()


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
