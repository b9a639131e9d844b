"""Running a sweep: every pending run in order, resumable, going on after failures.

The sweep file, its expansion into runs and the folder layout are configuration
(``testbed.config.sweep``); this module runs them. A run whose ``summary.json`` says
``"status": "ok"`` is skipped, anything else (missing, failed, half-written) is run again.
A failed run is recorded by the orchestrator (``status: failed`` + reason) and the sweep goes
on; Ctrl-C stops the sweep after the current run's teardown (``run_scenario`` re-raises
KeyboardInterrupt once clean). Beside the orchestrator's files each run folder gets
``sweep.json`` (sweep name, experiment, its ``kind`` and the grid values), which the tables
use to know which runs belong to which figure.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.common.files import read_json, write_json
from testbed.config.sweep import RunSpec, estimate_run_s, param_slug


def run_status(run_dir: Path) -> str | None:
    """The status in a run's summary.json, or None when there is none (or it is unreadable)."""
    summary = read_json(run_dir / "summary.json")
    return summary.get("status") if isinstance(summary, dict) else None


def is_done(run_dir: Path) -> bool:
    return run_status(run_dir) == "ok"


def sweep_meta(r: RunSpec) -> dict[str, Any]:
    return {"sweep": r.sweep, "experiment": r.experiment, "kind": r.kind,
            "scenario": r.scenario_ref, "params": r.params, "overrides": r.overrides,
            "method": r.method, "seed": r.seed}


@dataclass
class SweepReport:
    ran: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: int = 0
    interrupted: bool = False
    seconds: float = 0.0


RunFn = Callable[..., Any]


def run_sweep(
    runs: list[RunSpec],
    *,
    run_fn: RunFn | None = None,
    console: Any = None,
    progress: bool = True,
) -> SweepReport:
    """Run every pending run in order; skip finished ones; go on after failures.

    ``run_fn`` defaults to ``testbed.orchestration.run.run_scenario``. KeyboardInterrupt from a run (raised
    after its teardown) stops the sweep; finished runs stay intact and the report says so.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    zygote: Any = contextlib.nullcontext()
    if run_fn is None:
        from testbed.orchestration import launcher
        from testbed.orchestration.run import run_scenario as run_fn  # type: ignore[no-redef]

        zygote = launcher.shared()  # one pre-imported worker for all runs (launcher.py)
    console = console or Console()
    rep = SweepReport()
    t0 = time.monotonic()
    bar = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                   TextColumn("{task.description}"),
                   console=console, disable=not progress, transient=False)
    eta = SweepEta([0.0 if is_done(r.run_dir) else estimate_run_s(r.scenario) for r in runs])
    with zygote, bar:
        task = bar.add_task("", total=len(runs), eta=eta.text())
        current = "between runs"
        try:
            for i, r in enumerate(runs):
                if is_done(r.run_dir):
                    rep.skipped += 1
                    console.print(f"[dim]skip    {r.label}  (ok in {r.run_dir})[/dim]")
                    bar.advance(task)
                    continue
                bar.update(task, description=r.label)
                current = f"during {r.label}"
                t_run = time.monotonic()
                _run_one(r, run_fn, console, rep)
                eta.done(i, time.monotonic() - t_run)
                current = "between runs"
                bar.update(task, advance=1, eta=eta.text())
        except KeyboardInterrupt:
            # run_scenario re-raises only after its teardown, so the network is gone here.
            rep.interrupted = True
            console.print(f"[yellow]interrupted {current}; sweep stopped (re-run to resume)"
                          "[/yellow]")
    rep.seconds = time.monotonic() - t0
    return rep


class SweepEta:
    """Time left: the pending runs' estimates (``estimate_run_s``), scaled by how the runs
    done so far compared with their own estimates (a loaded machine runs late, a stop at
    target early)."""

    def __init__(self, estimates: list[float]) -> None:
        self.left = list(estimates)
        self.est_done = 0.0
        self.actual_done = 0.0

    def done(self, index: int, seconds: float) -> None:
        self.est_done += self.left[index]
        self.actual_done += seconds
        self.left[index] = 0.0

    def seconds(self) -> float:
        scale = self.actual_done / self.est_done if self.est_done > 0 else 1.0
        return sum(self.left) * scale

    def text(self) -> str:
        s = self.seconds()
        return f"ETA {int(s // 60)}:{int(s % 60):02d}" if s > 0 else ""


def _run_one(r: RunSpec, run_fn: RunFn, console: Any, rep: SweepReport) -> None:
    """One run through the orchestrator, its sweep.json, and its status line."""
    r.run_dir.parent.mkdir(parents=True, exist_ok=True)
    t_run = time.monotonic()
    outcome = run_fn(r.scenario, r.method, r.seed, r.run_dir, progress=False)
    rep.ran += 1
    if r.run_dir.is_dir():
        write_json(r.run_dir / "sweep.json", sweep_meta(r))
    summary = getattr(outcome, "summary", None) or {}
    status = getattr(outcome, "status", None) or summary.get("status", "failed")
    dt = time.monotonic() - t_run
    if status == "ok":
        rep.ok += 1
        thr = summary.get("throughput_samples_per_s")
        thr_s = f"{thr:8.1f} samples/s" if isinstance(thr, int | float) else ""
        console.print(f"[green]ok[/green]      {r.label}  {thr_s}  ({dt:.0f} s)")
    else:
        rep.failed.append(r.label)
        reason = str(summary.get("reason") or summary.get("error") or "").split(" | ")[-1]
        console.print(f"[red]failed[/red]  {r.label}  {str(reason)[:120]}  ({dt:.0f} s)")


def dry_run_rows(runs: list[RunSpec]) -> tuple[list[dict[str, Any]], float]:
    """Rows for --dry-run and the estimated seconds of the pending runs."""
    rows, total = [], 0.0
    for r in runs:
        done = is_done(r.run_dir)
        est = 0.0 if done else estimate_run_s(r.scenario)
        total += est
        rows.append({"experiment": r.experiment, "params": param_slug(r.params),
                     "method": r.method, "seed": r.seed,
                     "state": "skip (ok)" if done else "pending", "est_s": est})
    return rows, total
