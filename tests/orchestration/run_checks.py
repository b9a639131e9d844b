"""A finished run's folders under a results root, and the check that it left nothing behind:
no interface or process with its prefix, no recorded PID alive, the space held for the
final record given back."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.emulation import leftovers
from testbed.orchestration.rundir import RESERVE_NAME


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/*/summary.json"))


def assert_nothing_left(run_dir: Path) -> None:
    pids = json.loads((run_dir / "pids.json").read_text())
    prefix = pids["prefix"]
    assert prefix and prefix.startswith("nst")
    assert leftovers.interfaces_with_prefix(prefix) == []
    found = leftovers.find(prefix=prefix)
    assert found["interfaces"] == [] and found["pids"] == [], found
    started = pids["workers"] + pids["iperf3"]
    assert pids["workers"], "no worker PIDs recorded"
    alive = [p for p in started if leftovers.proc_starttime(p) is not None]
    assert alive == [], f"still running: {alive}"
    # the space held for the final record is given back once the record is written
    assert not (run_dir / RESERVE_NAME).exists()
