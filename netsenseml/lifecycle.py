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

Files the script opened and did not close are not flushed by ``os._exit``: close them
(``with open(...)``) inside the block.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Iterator
from typing import NoReturn


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def shutdown(code: int = 0, *, run_atexit: bool = True) -> NoReturn:
    """End this process with ``code``: destroy the process group (when ``code == 0``),
    flush logging and stdio, run the ``atexit`` handlers, then ``os._exit(code)``."""
    try:
        import torch.distributed as dist

        if code == 0 and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - a peer that already left changes nothing now
        print(f"netsenseml: note: destroy_process_group: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
    try:
        logging.shutdown()
    except Exception:  # noqa: BLE001 - a broken handler must not turn a clean exit into a crash
        pass
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
