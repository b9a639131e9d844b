"""How a run's workers are started: forked from a pre-imported zygote, or as fresh processes.

``Zygote`` is the orchestrator's side of ``workloads.zygote`` (protocol there): one process
that has imported torch, the worker and ``torch._dynamo`` forks each worker straight into
its emulated host's network namespace, and forks an own job (a scenario's
``workload.command`` run by ``python``) the same way (``workloads.job_runner``: the job's code
runs as ``python ARGV`` would run it, its torch imports already done). A fresh worker
process instead pays ~4.5 s of
imports (torch 2 s, dynamo 2.3 s, which DDP's constructor imports), and N of them starting
together on a 2-core machine pay it N times over two cores: that was most of a run's
overhead. ``ForkedWorker`` gives the forked workers the part of ``Popen`` that the
run and the emulation use (``pid``, ``poll``, ``wait``, ``returncode``); since each worker
leads its own session, killing its process group works as for a ``Popen``.

Lifetime: ``shared()`` keeps one zygote for a whole ``netsense run`` or sweep (its imports
are paid once); a run without one starts its own while the network is being built. Set
``NETSENSE_ZYGOTE=0`` to start every worker as a fresh process (the pre-zygote path, kept
as the fallback when a zygote cannot start, e.g. ``setns`` refused). The zygote exits when
its stdin closes, so an orchestrator killed with SIGKILL leaves no zygote behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180.0  # imports on a loaded 2-core machine have taken 30 s


class ZygoteError(RuntimeError):
    """The zygote could not start or answer; the caller falls back to fresh processes."""


def enabled() -> bool:
    return os.environ.get("NETSENSE_ZYGOTE", "1") not in ("0", "false", "no", "off")


class ForkedWorker:
    """A worker forked by the zygote, seen like a ``Popen`` (pid, poll, wait, returncode)."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]) -> None:
        self.zygote, self.pid, self.args = zygote, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.zygote.wait_event(0.05)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """One ``python -m workloads.zygote`` and a thread reading its replies."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        full_env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                        PYTHONUNBUFFERED="1")
        full_env.update(env or {})
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - read on failure
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workloads.zygote"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, cwd=str(REPO_ROOT), env=full_env,
            start_new_session=True)
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self._cond = threading.Condition()
        self._ready: bool | None = None
        self._error: str | None = None
        self._spawned: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    # replies ------------------------------------------------------------------------
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except json.JSONDecodeError:
                continue
            with self._cond:
                if "ready" in msg:
                    self._ready = bool(msg["ready"])
                    self._error = msg.get("error")
                    self.ready_s = time.monotonic() - self.started
                elif "exited" in msg:
                    self._exits[int(msg["exited"])] = int(msg["code"])
                elif "id" in msg:
                    self._spawned[int(msg["id"])] = msg
                self._cond.notify_all()
        with self._cond:  # the zygote is gone
            if self._ready is None:
                self._ready = False
                self._error = "exited before it was ready: " + self._stderr_tail()
            self._cond.notify_all()

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-3:])

    def wait_event(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the imports are done; ZygoteError if it failed or took too long."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready is not None, timeout):
                raise ZygoteError(f"zygote not ready after {timeout:.0f} s")
            if not self._ready:
                raise ZygoteError(f"zygote failed: {self._error}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self._ready is not False

    def exit_code(self, pid: int) -> int | None:
        """The worker's exit code once the zygote reaped it; 255 if the zygote died first."""
        with self._cond:
            code = self._exits.get(pid)
        if code is None and self.proc.poll() is not None:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return 255  # reaped by init after the zygote died: the code is lost
            except PermissionError:
                pass
        return code

    # requests -----------------------------------------------------------------------
    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: str, log: Path,
              netns_pid: int | None, timeout: float = 30.0, job: bool = False) -> ForkedWorker:
        """Fork one worker (``argv`` = the worker's own arguments) into a namespace; with
        ``job``, an own job instead (``argv`` = what follows ``python``: ``script.py
        args``, ``-m module args`` or ``-c code args``; ``workloads.job_runner``)."""
        self.wait_ready()
        with self._send_lock:
            self._next_id += 1
            rid = self._next_id
            req = {"id": rid, "argv": argv, "env": env, "cwd": cwd, "log": str(log),
                   "netns_pid": netns_pid, **({"job": True} if job else {})}
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                raise ZygoteError(f"zygote gone: {e}") from None
        with self._cond:
            if not self._cond.wait_for(lambda: rid in self._spawned, timeout):
                raise ZygoteError(f"zygote did not fork within {timeout:.0f} s")
            reply = self._spawned.pop(rid)
        if "pid" not in reply:
            raise ZygoteError(f"zygote could not fork: {reply.get('error')}")
        return ForkedWorker(self, int(reply["pid"]), ["python" if job else "workloads.train", *argv])

    def close(self) -> None:
        """Stop the zygote (its stdin closes; it exits); workers it forked are not touched."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        self._stderr.close()


_shared: Zygote | None = None


def current() -> Zygote | None:
    """The zygote ``shared()`` keeps for this process, when it is alive."""
    return _shared if _shared is not None and _shared.alive else None


@contextlib.contextmanager
def shared() -> Iterator[Zygote | None]:
    """One zygote for every run started inside the block (None when disabled)."""
    global _shared
    if not enabled() or _shared is not None:
        yield _shared
        return
    _shared = Zygote()
    try:
        yield _shared
    finally:
        z, _shared = _shared, None
        z.close()
