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
Even after a finished run, destroying it can hang once in a while (a 4-worker crossover run:
one rank printed its last record and never left ``destroy_process_group``, and the run
failed on its deadline two minutes later); so it gets ``destroy_timeout_s`` (30 s), after
which the process leaves without it, saying so on stderr, with the code it was given: the
job's work is done and written, a library's teardown cannot undo it.

Files the script opened and did not close are not flushed by ``os._exit``: close them
(``with open(...)``) inside the block.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import NoReturn


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


#: Seconds ``shutdown`` waits for ``destroy_process_group`` before leaving without it.
DESTROY_TIMEOUT_S = 30.0


def _destroy_group(timeout_s: float) -> None:
    """``destroy_process_group`` on a thread of its own, waited for at most ``timeout_s``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    done, errors = threading.Event(), []

    def destroy() -> None:
        try:
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - a peer that already left changes nothing now
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=destroy, name="destroy-process-group", daemon=True).start()
    if not done.wait(timeout_s):
        print(f"netsenseml: note: destroy_process_group did not return within {timeout_s:g} s; "
              "leaving without it", file=sys.stderr, flush=True)
    elif errors:
        e = errors[0]
        print(f"netsenseml: note: destroy_process_group: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


def shutdown(code: int = 0, *, run_atexit: bool = True,
             destroy_timeout_s: float = DESTROY_TIMEOUT_S) -> NoReturn:
    """End this process with ``code``: destroy the process group (when ``code == 0``; at
    most ``destroy_timeout_s`` waited for, module docstring), flush logging and stdio, run
    the ``atexit`` handlers, then ``os._exit(code)``."""
    if code == 0:
        try:
            _destroy_group(destroy_timeout_s)
        except Exception as e:  # noqa: BLE001 - e.g. torch.distributed not importable
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
