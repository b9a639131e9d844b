"""SIGINT/SIGTERM during a run: interrupt the run's work, never its teardown.

A signal while the run works raises :class:`RunInterrupted` (a KeyboardInterrupt carrying
the signal number) in the main thread; the run tears down in ``finally`` and re-raises it,
so a sweep stops and the CLI exits 128 + signum. A signal during teardown is remembered and
re-raised after it: teardown must finish, or the machine keeps our interfaces and processes.
SIGHUP (the terminal closed) is handled like SIGTERM: its default action would kill the
orchestrator mid-run with no teardown and a run folder saying "running".

Remembered, not ignored: a signal during teardown calls ``on_late`` (the run arms a timer
there), so a teardown that does not finish within a bounded wait still ends the process
with a true record, rather than holding the user's Ctrl-C for ever.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


class RunInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM during a run, re-raised after teardown; exit code 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class SignalGuard:
    """Turns SIGINT/SIGTERM into RunInterrupted until :meth:`protect` is called."""

    def __init__(self) -> None:
        self.protected = False
        self.pending: int | None = None
        self.on_late: Callable[[int], None] | None = None
        self._old: dict[int, Any] = {}

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.protected or self.pending is not None:
            first = self.pending is None
            self.pending = self.pending or signum
            if first and self.protected and self.on_late is not None:
                self.on_late(signum)  # teardown goes on, under a deadline
            return  # never interrupt teardown
        self.pending = signum
        raise RunInterrupted(signum)

    def install(self) -> None:
        """Only the main thread can own signal handlers; elsewhere this is a no-op."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._on_signal)

    def protect(self) -> None:
        """From now on signals are remembered, not raised (teardown has begun)."""
        self.protected = True

    def unprotect(self) -> None:
        """Signals interrupt again; one that came while protected is raised now."""
        self.protected = False
        if self.pending is not None:
            raise RunInterrupted(self.pending)

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
