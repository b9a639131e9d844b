"""The run folder of one run: what is written when, and the provenance in config.json.

Order: config.json and summary.json ``{"status": "running"}`` first; pids.json whenever a
tracked process starts; link.csv after probing; at the end steps.csv, events.csv and the
final summary.json. Every write is atomic (``testbed.common.files``). Layout and metric
definitions: ``testbed.orchestration.records``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from testbed.common import files
from testbed.emulation import rootless
from testbed.orchestration import records


def versions() -> dict[str, str]:
    """Versions of what produced the numbers (Python, packages, iperf3)."""
    out = {"python": platform.python_version()}
    for pkg in ("netsense", "torch", "mininet", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "?"
    try:
        out["iperf3"] = subprocess.run(
            ["iperf3", "--version"], capture_output=True, text=True, check=False, timeout=5
        ).stdout.split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        out["iperf3"] = "missing"
    out["git"] = git_commit()
    return out


def git_commit() -> str:
    """The source's commit (``+dirty`` with uncommitted changes); "?" outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=False, timeout=5)
        if head.returncode != 0:
            return "?"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, check=False, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "euid": os.geteuid(),  # 0 also in the rootless mode: root of the run's user namespace
        "emulation": "rootless" if rootless.in_namespace() else "native",
    }


class RunFolder:
    """Paths and writers of one run folder."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.workers = self.path / "workers"

    def prepare(self) -> None:
        """A fresh folder; a finished (ok) run is never overwritten."""
        old = files.read_json(self.path / "summary.json")
        if old and old.get("status") == "ok":
            raise ValueError(f"{self.path} holds a finished run (status ok); not overwriting")
        if self.path.exists():
            shutil.rmtree(self.path)  # an earlier failed attempt of this same run
        self.workers.mkdir(parents=True)

    def write_config(self, config: dict[str, Any]) -> None:
        files.write_json(self.path / "config.json", config)

    def write_summary(self, summary: dict[str, Any]) -> None:
        files.write_json(self.path / "summary.json", summary)

    def write_pids(self, pids: dict[str, Any]) -> None:
        files.write_json(self.path / "pids.json", pids)

    def write_links(self, rows: list[dict[str, Any]]) -> None:
        files.write_csv(self.path / "link.csv", records.LINK_COLUMNS, rows)

    def write_events(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        files.write_csv(self.path / "events.csv", columns, rows)

    def collect_steps(self, world_size: int, launch_wall: float,
                      target_accuracy: float | None) -> dict[str, Any]:
        """Writes steps.csv from the workers' JSONL; returns the summary metrics."""
        recs = records.load_worker_records(self.workers, world_size)
        rows, columns = records.step_rows(recs, launch_wall)
        files.write_csv(self.path / "steps.csv", columns, rows)
        return records.metrics(recs, target_accuracy)

    def rank0_log(self) -> Path:
        return self.workers / "rank0.jsonl"
