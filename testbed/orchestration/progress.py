"""The one status line a run shows while it runs (rich Live on a terminal, plain otherwise)."""

from __future__ import annotations

import time
from typing import Any


class RunProgress:
    """One status line per run: rich Live on a terminal, a plain line every 10 s otherwise."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self._live: Any = None
        self._last_plain = 0.0
        if enabled:
            from rich.console import Console

            self.console = Console(stderr=True)
            if self.console.is_terminal:
                from rich.live import Live

                self._live = Live("", console=self.console, refresh_per_second=4,
                                  transient=True)
                self._live.start()

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        line = f"{self.label}: {text}"
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(line))
        elif force or time.monotonic() - self._last_plain >= 10.0:
            self._last_plain = time.monotonic()
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def close(self, final: str | None = None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.enabled and final:
            self.console.print(f"{self.label}: {final}", highlight=False, markup=False,
                               soft_wrap=True)
