"""Who wrote a run record, and whether it still tells the truth: the source's commit, and
whether the orchestrator of a ``running`` record is alive.

Why here and not in ``testbed.orchestration.rundir``, which writes the records: the
analysis reads both (a dead run's true status, the commit a report was made with), and the
analysis sits beside the orchestration, not above it; so what both need lives below both.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.common.processes import is_same_process


def git_commit(exclude: Sequence[str] = ()) -> str:
    """The source's commit (``+dirty`` with uncommitted changes, not counting those to the
    paths ``exclude`` matches: a table being rewritten by the code that writes it); "?"
    outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    aside = ["--", ".", *(f":(exclude){e}" for e in exclude)] if exclude else []
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=False, timeout=5)
        if head.returncode != 0:
            return "?"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no", *aside],
                               capture_output=True, text=True, check=False, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def stale_reason(summary: dict[str, Any]) -> str | None:
    """Why a ``running`` record is not true any more, or None (finished, or still live).

    Only decidable on the host that ran it; a record from another host (copied results)
    whose run never finished is reported as such.
    """
    if summary.get("status") != "running":
        return None
    owner = summary.get("orchestrator")
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return "record says running but names no orchestrator (interrupted before its end)"
    if owner.get("host") not in (None, platform.node()):
        return f"never finished on host {owner.get('host')} (orchestrator pid {owner['pid']})"
    if is_same_process(owner):
        return None
    return f"orchestrator died (pid {owner['pid']} not alive)"
