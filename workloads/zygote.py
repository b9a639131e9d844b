"""A pre-imported worker: imports torch and the worker once, then forks workers on request.

    python -m workloads.zygote        (started by the testbed; speaks JSON lines on stdin/out)

Why: a fresh worker process spends ~2 s importing torch and ~2.3 s more importing
``torch._dynamo``, which DDP's constructor touches; on a 2-core machine N workers starting at
once pay that N times over two cores, before the first step of every run. A fork of a
process that has imported everything costs milliseconds and shares those pages.

Protocol (one JSON object per line):

- request on stdin: ``{"id": ..., "argv": [worker args], "env": {...}, "cwd": DIR,
  "log": FILE, "netns_pid": PID or null}``. The child starts a new session (its PID is its
  process group, as with ``Popen(start_new_session=True)``), joins the network namespace of
  ``netns_pid`` (an emulated host's shell) with ``setns``, sends stdout+stderr to FILE
  (truncated), replaces its environment and working directory, and runs
  ``workloads.train.main(argv)``, which ends the process. With ``"job": true`` the child
  runs an own job instead: ``argv`` is what follows ``python`` in the job's command
  (``workloads.job_runner``), and the job's exit status is the child's.
- replies on stdout: ``{"ready": true, "pid": ...}`` once imported; ``{"id": ..., "pid": N}``
  per fork (or ``{"id": ..., "error": "..."}``); ``{"exited": N, "code": C}`` when a child
  ends, C as ``Popen.returncode`` (negative: killed by that signal).

Fork safety: the zygote runs no torch operation and starts no thread, so the child inherits
a single-threaded process with no lock held (checked at start: it refuses to serve if the
imports left a thread behind). Every worker seeds its own generators (``--seed``), so the
shared pre-fork random state does not matter. When stdin closes (its orchestrator ended,
even by SIGKILL) the zygote exits; its children live on in their own sessions and belong
to the run that started them (its registry and teardown kill them by PID).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from workloads import job_runner

CLONE_NEWNET = 0x40000000
#: The zygote's own environment and ``sys.path`` (an own job's child compares its own with them).
_BOOT_ENV: dict[str, str] = dict(os.environ)
_BOOT_PATH: list[str] = list(sys.path)


class _Leave(Exception):  # noqa: N818 - not an error: the job ended with its code
    """An own job returned its exit code (``_child``)."""


def _setns_net(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into the network namespace of {pid}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _child(req: dict[str, Any]) -> NoReturn:
    """Become the worker described by ``req``; never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if req.get("netns_pid"):
            _setns_net(int(req["netns_pid"]))
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        job_runner.stacks_on_signal()  # where it is, when a deadline asks (NETSENSE_STACK_FILE)
        if req.get("job"):  # an own job: `python ARGV` with the imports done (job_runner)
            code = job_runner.run(list(req["argv"]), _BOOT_ENV, _BOOT_PATH)
            raise _Leave
        from workloads import train

        # The worker's clock starts now: its imports were paid once, by the zygote.
        train.PROC_WALL, train.PROC_T0 = time.time(), time.perf_counter()
        sys.argv = ["workloads.train", *req["argv"]]
        train.main(list(req["argv"]))
    except _Leave:
        pass
    except SystemExit as e:  # bad arguments: sys.exit(2) from the parser
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the worker's log, exit 1
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    job_runner.leave(code)  # an own job ended by a signal (Ctrl-C): ended by it, as python would be


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _reply({"exited": pid, "code": code})


def serve() -> int:
    import torch._dynamo  # noqa: F401 - what DDP's constructor imports (2.3 s)
    import torch.nn.parallel.distributed  # noqa: F401

    from workloads import train  # noqa: F401 - torch, netsenseml, models, datasets

    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
        _reply({"ready": False, "error": "imports started a thread; forking is not safe"})
        return 1
    _reply({"ready": True, "pid": os.getpid()})
    buf = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        _reap()
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # the orchestrator closed our stdin (or died): done
            _reap()
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            req: dict[str, Any] = {}
            try:
                req = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
            except Exception as e:  # noqa: BLE001 - a bad request is answered, not fatal
                _reply({"id": req.get("id"), "error": f"{type(e).__name__}: {e}"})
                continue
            if pid == 0:
                _child(req)
            _reply({"id": req.get("id"), "pid": pid})


if __name__ == "__main__":
    sys.exit(serve())
