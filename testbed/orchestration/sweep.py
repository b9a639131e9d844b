"""Running a sweep: every pending run in order, resumable, going on after failures.

The sweep file, its expansion into runs and the folder layout are configuration
(``testbed.config.sweep``); this module runs them. A run whose ``summary.json`` says
``"status": "ok"`` is skipped, anything else (missing, failed, half-written) is run again.
A failed run is recorded by the orchestrator (``status: failed`` + reason) and the sweep goes
on; Ctrl-C stops the sweep after the current run's teardown (``run_scenario`` re-raises
KeyboardInterrupt once clean). Beside the orchestrator's files each run folder gets
``sweep.json`` (sweep name, experiment, its ``kind`` and the grid values), which the tables
use to know which runs belong to which figure. The orchestrator writes it together with the
run's first summary (``run_scenario(meta=...)``), so an interruption at any moment leaves
no run without it; a finished run found without one (older results) gets it when skipped.

One sweep process per results tree of a sweep: :class:`SweepLock` holds an ``fcntl.flock``
on ``<results>/<sweep>/.lock`` for the whole sweep; the kernel drops it when the holder
dies, however it dies, so a stale lock cannot exist. A second sweep on the same folder
refuses with one line naming the holder's pid (two sweeps would each delete the other's
"unfinished" run folders to re-run them).

Where the runs execute (here, or on a Ray cluster) is the executor's business
(``testbed.orchestration.executors``); skipping, status lines and the report are the same for all.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.common.files import NoSpace, is_no_space, read_json, write_json
from testbed.config.estimate import estimate_runs
from testbed.config.sweep import RunSpec, estimate, param_slug
from testbed.orchestration import dilation
from testbed.orchestration.executors import Finished, LocalExecutor, sweep_meta


def run_status(run_dir: Path) -> str | None:
    """The status in a run's summary.json, or None when there is none (or it is unreadable)."""
    summary = read_json(run_dir / "summary.json")
    return summary.get("status") if isinstance(summary, dict) else None


def is_done(run_dir: Path) -> bool:
    """A finished run; never a folder that is a link (its run is refused, not skipped)."""
    return not run_dir.is_symlink() and run_status(run_dir) == "ok"


@dataclass
class SweepReport:
    ran: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    skipped: int = 0
    interrupted: bool = False
    seconds: float = 0.0


RunFn = Callable[..., Any]


class SweepLocked(RuntimeError):
    """Another live process holds the sweep's lock; ``str()`` is the one line to show."""


class SweepLock:
    """Exclusive, non-blocking flock on ``<folder>/.lock``; the file holds the holder's pid.

    The pid is written only after the lock is taken, into the locked file, so a reader
    who fails to lock sees the holder's pid (or an empty file for an instant).
    """

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if is_no_space(exc):
                raise NoSpace(self.path.parent, exc) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise SweepLocked(f"results folder {self.path.parent} is in use by another "
                              f"sweep (pid {holder}); wait for it to finish or use another "
                              "--results") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # the lock is held; only the holder's pid is not on record
            if not is_no_space(exc):
                os.close(fd)
                raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (harmless)
            self._fd = None

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def run_sweep(
    runs: list[RunSpec],
    *,
    run_fn: RunFn | None = None,
    console: Any = None,
    progress: bool = True,
    executor: Any = None,
) -> SweepReport:
    """Run every pending run in order; skip finished ones; go on after failures.

    ``executor`` (``testbed.orchestration.executors``) decides where runs execute; the
    default is a ``LocalExecutor`` calling ``run_fn`` here, in order (default
    ``testbed.orchestration.run.run_scenario``, called with ``meta=``, the run's sweep.json). KeyboardInterrupt from a run (raised after its
    teardown) stops the sweep; finished runs stay intact and the report says so. Raises
    SweepLocked, before anything runs, when another process runs a sweep into the same
    folder.
    """
    from rich.console import Console

    locks = _lock_folders(runs)
    executor = executor or LocalExecutor(run_fn)
    console = console or Console()
    rep = SweepReport()
    t0 = time.monotonic()
    bar = _progress_bar(console, progress)
    with locks, bar:
        task = bar.add_task("", total=len(runs), eta="")
        pending = _skip_finished(runs, console, rep, bar, task)
        _run_pending(pending, executor, console, rep, bar, task)
    rep.seconds = time.monotonic() - t0
    return rep


def _lock_folders(runs: list[RunSpec]) -> contextlib.ExitStack:
    """Every sweep folder the runs write into (``<results>/<sweep>``), locked; nothing
    left locked when one of them is taken (SweepLocked)."""
    locks = contextlib.ExitStack()
    try:
        for folder in sorted({r.run_dir.parents[2] for r in runs}):  # <results>/<sweep>
            locks.enter_context(SweepLock(folder))
    except BaseException:
        locks.close()
        raise
    return locks


def _progress_bar(console: Any, enabled: bool) -> Any:
    """The sweep's bar: runs done of all, elapsed, time left, the runs in flight."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                    TextColumn("{task.description}"),
                    console=console, disable=not enabled, transient=False)


def _skip_finished(runs: list[RunSpec], console: Any, rep: SweepReport, bar: Any,
                   task: Any) -> list[RunSpec]:
    """The runs still to do; those already ok are counted as skipped (and get the
    sweep.json an older sweep did not write)."""
    pending: list[RunSpec] = []
    for r in runs:
        if is_done(r.run_dir):
            if not (r.run_dir / "sweep.json").is_file():
                write_json(r.run_dir / "sweep.json", sweep_meta(r))
            rep.skipped += 1
            console.print(f"[dim]skip    {r.label}  (ok in {r.run_dir})[/dim]")
            bar.advance(task)
        else:
            pending.append(r)
    return pending


def _run_pending(pending: list[RunSpec], executor: Any, console: Any, rep: SweepReport,
                 bar: Any, task: Any) -> None:
    """The pending runs through ``executor``, each finished one reported and the bar's time
    left updated; a KeyboardInterrupt (raised after a run's teardown) stops the sweep."""
    eta = SweepEta([e["seconds"] for e in estimate_runs(
        [(r.scenario, r.method) for r in pending], dilation.is_cached)])
    index = {r.label: i for i, r in enumerate(pending)}
    running: list[str] = []
    bar.update(task, eta=eta.text())

    def started(r: RunSpec) -> None:
        running.append(r.label)
        bar.update(task, description=_describe(running))

    try:
        with executor.session():
            for fin in executor.execute(pending, started):
                with contextlib.suppress(ValueError):
                    running.remove(fin.run.label)
                _report(fin, console, rep)
                if fin.run.label in index:
                    eta.done(index[fin.run.label], fin.seconds)
                bar.update(task, eta=eta.text())
                bar.update(task, description=_describe(running))
                bar.advance(task)
    except KeyboardInterrupt:
        # run_scenario re-raises only after its teardown, so the network is gone here.
        rep.interrupted = True
        current = f"during {running[0]}" if running else "between runs"
        console.print(f"[yellow]interrupted {current}; sweep stopped (re-run to resume)"
                      "[/yellow]")


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


def _describe(running: list[str]) -> str:
    if len(running) <= 1:
        return running[0] if running else ""
    return f"{len(running)} running"


def _report(fin: Finished, console: Any, rep: SweepReport) -> None:
    """One finished run's status line and counts."""
    if fin.refused:  # the folder is another live run's (or a finished one's)
        rep.failed.append(fin.run.label)
        console.print(f"[red]refused[/red] {fin.run.label}  {fin.summary.get('reason')}",
                      highlight=False)
        return
    rep.ran += 1
    where = f" on {fin.where}" if fin.where else ""
    if fin.status == "ok":
        rep.ok += 1
        thr = fin.summary.get("throughput_samples_per_s")
        thr_s = f"{thr:8.1f} samples/s" if isinstance(thr, int | float) else ""
        console.print(f"[green]ok[/green]      {fin.run.label}  {thr_s}  "
                      f"({fin.seconds:.0f} s{where})")
    else:
        rep.failed.append(fin.run.label)
        summary = fin.summary
        reason = str(summary.get("reason") or summary.get("error") or "").split(" | ")[-1]
        console.print(f"[red]failed[/red]  {fin.run.label}  {str(reason)[:120]}  "
                      f"({fin.seconds:.0f} s{where})")


def dry_run_rows(runs: list[RunSpec]) -> tuple[list[dict[str, Any]], float]:
    """Rows for --dry-run and the estimated seconds of the pending runs."""
    rows, total = [], 0.0
    done_at = [is_done(r.run_dir) for r in runs]
    guesses = dict(zip([i for i, d in enumerate(done_at) if not d], estimate_runs(
        [(r.scenario, r.method) for r, d in zip(runs, done_at, strict=True) if not d],
        dilation.is_cached), strict=True))
    for i, r in enumerate(runs):
        done = done_at[i]
        guess = guesses.get(i) or estimate(r.scenario, r.method)
        est = 0.0 if done else guess["seconds"]
        total += est
        rows.append({"experiment": r.experiment, "params": param_slug(r.params),
                     "method": r.method, "seed": r.seed,
                     "state": "skip (ok)" if done else "pending", "est_s": est,
                     "k": guess["k"], "virtual_s": guess["virtual_s"],
                     "step_s": guess.get("step_s"), "bound": bool(guess.get("bound"))})
    return rows, total
