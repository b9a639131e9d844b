"""The run folder of one run: what is written when, and the provenance in config.json.

Order: config.json and summary.json ``{"status": "running"}`` first; pids.json whenever a
tracked process starts; link.csv after probing; at the end steps.csv, events.csv and the
final summary.json. Every write is atomic (``testbed.common.files``). Layout and metric
definitions: ``testbed.orchestration.worker_records``.

A record must never lie: while a run is live, summary.json says ``running`` and names the
orchestrator (pid and start time); the run is also registered in the state dir
(``leftovers.register_run``). If the orchestrator dies without writing the final summary
(SIGKILL, OOM, power), ``testbed.common.provenance.stale_reason`` tells from the record alone that it is dead,
the analysis shows the run as failed, and `netsense clean` rewrites the record
(:func:`repair_dead_runs`).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from netsenseml.dilation import NONE, Dilation
from testbed.common import files
from testbed.common.provenance import git_commit, stale_reason
from testbed.emulation import leftovers, rootless
from testbed.orchestration import worker_records


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


def host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "euid": os.geteuid(),  # 0 also in the rootless mode: root of the run's user namespace
        "emulation": "rootless" if rootless.in_namespace() else "native",
    }


def orchestrator_entry() -> dict[str, Any]:
    """This process as the run's owner: pid, start time (PID reuse safe) and host."""
    entry = leftovers.process_entry(os.getpid(), "orchestrator")
    return {"pid": entry["pid"], "starttime": entry["starttime"], "host": platform.node()}


def repair_record(run_dir: Path) -> str | None:
    """Rewrite a dead run's ``running`` summary as failed with the reason; returns it."""
    path = Path(run_dir) / "summary.json"
    summary = files.read_json(path)
    if not isinstance(summary, dict):
        return None
    reason = stale_reason(summary)
    if reason is None:
        return None
    summary.update(status="failed", reason=reason, repaired_by="netsense clean")
    RunFolder(Path(run_dir)).release()  # its blocks make room for the record on a full disk
    files.write_json(path, summary)
    return reason


def repair_dead_runs(state_dir: Path | None = None, refused: list[str] | None = None
                     ) -> list[str]:
    """Repair the record of every registered run whose orchestrator is dead; returns the
    run folders repaired (their registrations are removed either way). Registrations
    another user could have written are not acted on (their reasons go to ``refused``)."""
    repaired = []
    for reg, data in leftovers.dead_run_records(state_dir, refused):
        run_dir = Path(str(data.get("run_dir", "")))
        try:
            if run_dir.is_dir() and repair_record(run_dir) is not None:
                repaired.append(str(run_dir))
        except OSError:
            continue  # keep the registration: the next clean tries again
        leftovers.unregister_run(reg)
    return repaired


@dataclass
class RunOutcome:
    """How one run ended: its folder, ``ok`` or ``failed``, and its final summary.json.

    Here, with the run folder, because both run paths (emulated and real hosts) return it
    and neither should import the other for it.
    """

    run_dir: Path
    status: str  # "ok" | "failed"
    summary: dict[str, Any]


#: The run folder's space for its final record: written with the ``running`` summary and
#: freed just before the final summary when the disk has filled meanwhile (workers, the
#: bottleneck sampler and anything else on the filesystem may take the last byte, and the
#: blocks a deleted ``running`` record frees can be taken again before they are used).
RESERVE_NAME = ".final-record-reserve"
RESERVE_BYTES = 64 * 1024


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
        if old and old.get("status") == "running" and stale_reason(old) is None:
            owner = old.get("orchestrator") or {}
            raise ValueError(f"{self.path} is being written by a live run (pid "
                             f"{owner.get('pid')}); not overwriting")
        if self.path.is_symlink():  # never write (or delete) through a link
            raise ValueError(f"{self.path} is a symbolic link; not followed (remove it to "
                             "run here)")
        if self.path.exists():
            shutil.rmtree(self.path)  # an earlier failed attempt of this same run
        self.workers.mkdir(parents=True)

    def discard(self) -> None:
        """Remove what this run wrote into its folder (a run that could not even write its
        first record must leave nothing behind)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def reserve(self) -> None:
        """Hold ``RESERVE_BYTES`` for the final record (module constant's comment).
        files.NoSpace if the filesystem cannot give them."""
        path = self.path / RESERVE_NAME
        try:
            with open(path, "wb") as fh:
                fh.write(bytes(RESERVE_BYTES))  # written, not sparse: the blocks are held
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            path.unlink(missing_ok=True)
            if files.is_no_space(exc):
                raise files.NoSpace(self.path, exc) from exc
            raise

    def release(self) -> None:
        """Give the reserve back (before the final record on a full disk, or after it)."""
        (self.path / RESERVE_NAME).unlink(missing_ok=True)

    def write_config(self, config: dict[str, Any]) -> None:
        files.write_json(self.path / "config.json", config)

    def write_summary(self, summary: dict[str, Any]) -> None:
        files.write_json(self.path / "summary.json", summary)

    def write_pids(self, pids: dict[str, Any]) -> None:
        files.write_json(self.path / "pids.json", pids)

    def write_links(self, rows: list[dict[str, Any]]) -> None:
        files.write_csv(self.path / "link.csv", worker_records.LINK_COLUMNS, rows)

    def write_events(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        files.write_csv(self.path / "events.csv", columns, rows)

    def collect_steps(self, world_size: int, launch_wall: float,
                      target_accuracy: float | None,
                      dilation: Dilation | float = NONE) -> dict[str, Any]:
        """Writes steps.csv from the workers' JSONL; returns the summary metrics."""
        recs = worker_records.load_worker_records(self.workers, world_size)
        rows, columns = worker_records.steps_csv_rows(recs, launch_wall, dilation)
        files.write_csv(self.path / "steps.csv", columns, rows)
        return worker_records.metrics(recs, target_accuracy, rows)

    def host_dir(self, host: str) -> Path:
        """An own job's working directory on emulated host ``host`` (``hosts/<host>/``):
        each host's own disk, as on separate machines, and gone with the run folder, so
        nothing a run writes there is seen by the next run."""
        return self.path / "hosts" / host

    def rank0_log(self) -> Path:
        return self.workers / "rank0.jsonl"
