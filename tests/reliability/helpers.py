"""Shared checks of the reliability tests: one-line errors and nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from testbed.emulation import leftovers
from tests.cli.invoke import marked_pids

NETSENSE = Path(sys.executable).parent / "netsense"


def one_line_error(stderr: str, *needles: str) -> str:
    """The single stderr line of a refused command; asserts it names every needle."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def env_for(tmp_path: Path) -> tuple[dict[str, str], str]:
    marker = uuid.uuid4().hex
    env = dict(os.environ, NETSENSE_STATE_DIR=str(tmp_path / "state"),
               NETSENSE_TEST_MARK=marker, COLUMNS="200")
    return env, marker


def run_cli(args: list[str], tmp_path: Path, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env2, marker = env_for(tmp_path)
    proc = subprocess.run([str(NETSENSE), *args], capture_output=True, text=True,
                          env=env or env2, timeout=timeout, cwd=tmp_path)
    if env is None:
        assert marked_pids(marker) == [], "processes of the command outlived it"
    return proc


def assert_run_left_nothing(run_dir: Path) -> None:
    """No interface with the run's prefix, no live process the run recorded."""
    pids = json.loads((run_dir / "pids.json").read_text()) if (
        run_dir / "pids.json").exists() else {}
    prefix = pids.get("prefix")
    if prefix:
        assert leftovers.interfaces_with_prefix(prefix) == [], prefix
    started = (pids.get("workers") or []) + (pids.get("iperf3") or [])
    alive = [p for p in started if leftovers.proc_starttime(p) is not None]
    assert alive == [], f"still running: {alive}"


def state_empty(state: Path) -> bool:
    return not state.exists() or not any(p for p in state.iterdir()
                                         if not p.name.startswith("."))


def in_private_mount(script: str, env: dict[str, str], cwd: Path, timeout: float
                     ) -> subprocess.CompletedProcess:
    """``sh -c script`` in a private mount namespace of its own (``unshare --mount``): the
    tmpfs it mounts is seen by nothing else and vanishes with it. The script exits 99 when
    it cannot mount: the test is skipped."""
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=cwd)
    if proc.returncode == 99:
        pytest.skip("cannot mount tmpfs here")
    return proc
