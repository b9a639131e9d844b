"""The ``netsense`` command run with its leftover checks: in-process (``netsense``, typer's
CliRunner) or as the installed script (``netsense_proc``), and the smallest good scenario.

"Nothing left behind" is checked two ways that do not depend on what other tests on this
machine are doing at the same time: the emulation registry directory given to the command
(NETSENSE_STATE_DIR; an Emulation registers its prefix *before* creating anything) stays
empty, and no process carrying this call's marker in its environment (every child inherits
it) is alive afterwards (``marked_pids``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

NETSENSE = Path(sys.executable).parent / "netsense"
GOOD = {
    "name": "t",
    "topology": {"kind": "star", "n_workers": 2, "n_cross": 1, "rate_mbit": 50},
    "workload": {"model": "mlp", "dataset": "digits", "batch_size": 8, "steps": 3},
    "methods": ["allreduce"],
}


def marked_pids(marker: str) -> list[int]:
    needle = f"NETSENSE_TEST_MARK={marker}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def netsense_proc(args: list[str], tmp_path: Path, timeout: float = 120):
    marker = uuid.uuid4().hex
    state = tmp_path / "state"
    env = dict(os.environ, NETSENSE_STATE_DIR=str(state), NETSENSE_TEST_MARK=marker,
               COLUMNS="200")
    proc = subprocess.run([str(NETSENSE), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)
    assert marked_pids(marker) == [], "processes of the command outlived it"
    assert not state.exists() or not any(state.iterdir()), "an emulation was registered"
    return proc


def netsense(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """In-process run of the app with the same leftover checks; returns the CliRunner result."""
    from typer.testing import CliRunner

    from testbed.cli import app

    marker = uuid.uuid4().hex
    state = tmp_path / "state"
    monkeypatch.setenv("NETSENSE_STATE_DIR", str(state))
    monkeypatch.setenv("NETSENSE_TEST_MARK", marker)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert marked_pids(marker) == [], "processes of the command outlived it"
    assert not state.exists() or not any(state.iterdir()), "an emulation was registered"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    return result
