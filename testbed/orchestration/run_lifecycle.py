"""One run's lifecycle, written once; a backend says what the work and its teardown are.

The lifecycle (``RunLifecycle.execute``):

1. ``_make_config``: everything config.json says, computed before anything is written (an
   interruption here leaves no folder at all); the backend adds its keys
   (``_config_extra``);
2. ``_begin``: the folder with config.json, sweep.json (the caller's metadata), the
   ``running`` summary naming this process, the folder's reserve of free space
   (``rundir.RESERVE_NAME``) and the live-run registration for ``netsense clean``, written
   with signals held off so that a folder never exists without its summary;
3. ``_work`` (the backend's): build or shape the network, start what the timeline needs,
   launch the workers and watch them until they finish, fail or pass the deadline;
4. ``_finish``, with signals held off: ``_teardown_all`` (the backend's: every resource
   it created, each step getting its turn and a deadline, ``bounded``), ``_collect`` (steps.csv,
   events.csv, and the backend's network facts), then the status, and the final
   summary.json written however full the disk is (``_write_final``).

A run is ``ok`` only if the work raised nothing, every worker reported ok, there are step
records, every scheduled timeline event was applied (``_timeline_shortfall``; a run told
to ``stop-at-target`` that reached it may leave later events unapplied), the loss says the
model learned (``health.learning``) and the teardown finished. Failures never raise out of
``execute``: they end up in summary.json with a one-line ``reason`` (``RunFailed``'s
message, or the exception's type and first line, the traceback in orchestrator-error.txt;
a full disk is named first). The one thing that propagates is an interruption
(SIGINT/SIGTERM), *after* teardown, as ``RunInterrupted``, so that a sweep stops and the
CLI exits 130/143; its reason reads "interrupted by SIGINT" on every backend. A signal
during teardown gives it ``SIGNAL_GRACE_S`` more, then the record is written and the
process leaves, the rest registered for ``netsense clean``.

Backends: ``testbed.orchestration.run._Run`` (emulated networks: Mininet hosts in
namespaces) and ``testbed.orchestration.real_hosts.HostsRun`` (real machines over ssh).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from netsenseml.dilation import NONE
from netsenseml.methods import MethodSpec
from testbed.common import files
from testbed.emulation import leftovers
from testbed.orchestration import health, hostload, worker_records
from testbed.orchestration.interrupts import RunInterrupted, SignalGuard
from testbed.orchestration.progress import RunProgress
from testbed.orchestration.rundir import (
    RunFolder,
    RunOutcome,
    host_facts,
    orchestrator_entry,
    versions,
)
from testbed.orchestration.timeline import EVENT_COLUMNS

#: After SIGINT/SIGTERM during teardown, how long it may still take before the process
#: writes its record and leaves (``netsense clean`` then finishes what is left);
#: $NETSENSE_TEARDOWN_GRACE_S overrides it.
SIGNAL_GRACE_S = 8.0
#: Free space below which a failed run's cause is taken to be the full disk.
LOW_SPACE_BYTES = 64 * 1024


def signal_grace() -> float:
    """``SIGNAL_GRACE_S``, or $NETSENSE_TEARDOWN_GRACE_S when set to a number."""
    try:
        return max(0.1, float(os.environ.get("NETSENSE_TEARDOWN_GRACE_S", SIGNAL_GRACE_S)))
    except ValueError:
        return SIGNAL_GRACE_S


class RunFailed(Exception):
    """A run-level failure with a one-line reason for summary.json."""


def bounded(fn: Callable[[], Any], timeout_s: float) -> str | None:
    """Run a teardown step with a deadline; its error (or that it did not finish) as text.

    The step runs in a daemon thread: one that blocks past its deadline is left behind (it
    can hold nothing the next steps need) and the teardown goes on.
    """
    errors: list[str] = []

    def target() -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every teardown step must get its turn
            errors.append(f"{type(exc).__name__}: {exc}")

    th = threading.Thread(target=target, name="teardown-step", daemon=True)
    th.start()
    th.join(timeout_s)
    if th.is_alive():
        return f"did not finish in {timeout_s:.0f} s"
    return errors[0] if errors else None


class RunLifecycle:
    """The phases every run goes through; subclasses implement the work and its teardown."""

    def __init__(self, scenario: Any, spec: MethodSpec, seed: int, run_dir: Path, progress: bool,
                 meta: dict[str, Any] | None = None) -> None:
        self.scn = scenario
        self.spec = spec  # the run's method, parsed where it entered (netsenseml.methods)
        self.method = method = str(spec)  # its text, as the records and the folder carry it
        self.seed = seed
        self.folder = RunFolder(run_dir)
        self.progress = RunProgress(progress, f"[{scenario.name}] {method} seed {seed}")
        self.signals = SignalGuard()
        self.meta = meta
        self.timeline: Any = None
        self.launch_wall: float | None = None
        self.dilation = NONE  # the run's time dilation (netsenseml.dilation)
        self.timing: dict[str, float] = {}
        self.config: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.network: dict[str, Any] = {}
        self.warnings: list[str] = []
        self._registration: Path | None = None
        self._teardown_step: str | None = None  # named in the record if a signal cuts it
        self._final = threading.Lock()  # the final summary is written once, by one thread
        self._final_written = False
        self._overdue_timer: threading.Timer | None = None

    # backend hooks ----------------------------------------------------------------
    def _config_extra(self) -> dict[str, Any]:
        """The backend's config.json keys (between world_size and versions)."""
        return {}

    def _work(self) -> None:
        raise NotImplementedError

    def _teardown_all(self) -> None:
        """Remove everything the work created; errors go to ``teardown_errors``, steps
        that did not finish to ``teardown_incomplete`` (which fails the run)."""

    def _after_teardown(self) -> None:
        """After teardown, before the results are collected (e.g. the final pids.json)."""

    def _collect_more(self) -> None:
        """The backend's facts into ``self.summary`` (after steps.csv and events.csv)."""

    def _final_fields(self) -> dict[str, Any]:
        """The backend's keys of the final summary (beside status, reason, wall_s...)."""
        return {}

    def _abandon(self, why: str) -> None:
        """Teardown will not finish: mark what is left for ``netsense clean``."""

    # lifecycle ------------------------------------------------------------------------
    def _make_config(self) -> None:
        """Everything config.json says, computed before anything is written (an
        interruption here leaves no folder at all)."""
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        owner = orchestrator_entry()
        self.config = {
            "scenario": self.scn.model_dump(mode="json"),
            "method": self.method,
            "seed": self.seed,
            "run_id": self.folder.path.name,
            "world_size": self.scn.world_size,
            **self._config_extra(),
            "versions": versions(),
            "host": host_facts(),
            "started_at": started,
            "orchestrator_pid": os.getpid(),
        }
        self.summary = {
            "scenario": self.scn.name, "method": self.method, "seed": self.seed,
            "run_id": self.folder.path.name, "status": "running", "started_at": started,
            "orchestrator": owner,
        }

    def _begin(self) -> None:
        """The folder with config.json, the ``running`` summary naming this process,
        sweep.json (the caller's metadata) and the live-run registration; signals are held
        off meanwhile so that a folder never exists without its summary. A full disk here
        leaves no folder content at all (files.NoSpace is raised to the caller)."""
        self.folder.prepare()
        try:
            self.folder.write_config(self.config)
            if self.meta is not None:
                files.write_json(self.folder.path / "sweep.json", self.meta)
            self.folder.write_summary(self.summary)
            self.folder.reserve()
        except files.NoSpace:
            self.folder.discard()
            raise
        try:
            self._registration = leftovers.register_run(self.folder.path)
        except OSError as exc:  # the record still names its pid: analysis can tell
            self.summary["registration_note"] = f"run not registered for clean: {exc}"

    def _collect(self) -> None:
        """steps.csv (the workers' records), events.csv (what the timeline applied), the
        counts the status needs, then the backend's facts."""
        self.summary.update(self.folder.collect_steps(
            self.scn.world_size, self.launch_wall or time.time(),
            self.scn.workload.target_accuracy, self.dilation))
        events = [vars(r) for r in (self.timeline.snapshot() if self.timeline else [])]
        self.folder.write_events(EVENT_COLUMNS, events)
        self.summary["events_applied"] = len(events)
        self.summary["events_scheduled"] = len(self.timeline.actions) if self.timeline else 0
        self._collect_more()

    def _timeline_shortfall(self) -> str | None:
        """Why the timeline did not happen in full, or None.

        A scenario whose events did not all happen did not run as described, so such a run
        is ``failed``, never ``ok`` (the schema already refuses events past a time limit;
        this catches step-counted runs that ended first, and a slow or stuck timeline).
        """
        if self.timeline is not None and self.timeline.error:  # raced the workers' exit
            return f"timeline event failed: {self.timeline.error}"
        applied = self.summary.get("events_applied", 0)
        scheduled = self.summary.get("events_scheduled", 0)
        if self.timeline is None or applied >= scheduled:
            return None
        nxt = self.timeline.actions[applied]
        if self._stopped_at_target():
            # it asked to stop at the target and did: what was scheduled after that point was
            # never part of its run (a schedule longer than the slowest method needs)
            self.summary["timeline_note"] = (
                f"stopped at the target after {applied} of {scheduled} events; the next "
                f"({nxt.source}, due at {nxt.at:g} s) was later")
            return None
        return (f"timeline incomplete: {applied} of {scheduled} events applied; the next "
                f"({nxt.source}, due at {nxt.at:g} s) came after the workers finished")

    def _stopped_at_target(self) -> bool:
        """The workers were told to stop at the target (``stop-at-target`` in the
        workload's args) and rank 0's records say they reached it."""
        asked = bool(self.scn.workload.arg("stop-at-target"))
        return asked and self.summary.get("time_to_accuracy_s") is not None

    def _finish(self, status: str, reason: str | None, t_start: float) -> None:
        """Teardown, results and the final summary; signals wait until this is done."""
        self.progress.update("tearing down", force=True)
        self._teardown_all()
        try:
            self._after_teardown()
        except OSError as exc:  # (a full disk) the final record must still be written
            status = "failed"
            reason = reason or str(exc)
        try:
            self._collect()
        except Exception as exc:  # noqa: BLE001
            status = "failed"
            reason = reason or f"collecting results: {type(exc).__name__}: {exc}"
        if status == "ok" and self.summary.get("worker_status") not in ("ok", None):
            status, reason = "failed", "a worker reported failure"
        if status == "ok" and not self.summary.get("steps"):
            status, reason = "failed", "no step records"
        if status == "ok" and (short := self._timeline_shortfall()):
            status, reason = "failed", short
        if status == "ok" and (why := self._learning_verdict()):
            status, reason = "failed", why
        if self.summary.get("teardown_incomplete"):
            left = "; ".join(self.summary["teardown_incomplete"])
            note = f"teardown incomplete ({left}); `netsense clean` removes the rest"
            status, reason = "failed", f"{reason}; {note}" if reason else note
        if reason and status != "ok" and (full := self._no_space_text(reason)):
            reason = full
        self.summary.update(
            status=status,
            reason=reason,
            world_size=self.scn.world_size,
            **self._final_fields(),
            wall_s=round(time.monotonic() - t_start, 3),
            finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        self._record_phases()
        self._pacing_verdict()
        busy = hostload.verdict(self.summary.get("host_load"))
        if busy is not None:
            self.warnings.append(busy)
        if self.network:
            self.summary["network"] = self.network
        if self.warnings:
            self.summary["warnings"] = self.warnings
        if self.summary.get("reason") is None:
            self.summary.pop("reason")
        if self._write_final(self.summary):
            leftovers.unregister_run(self._registration)

    def _pacing_verdict(self) -> None:
        """An emulated accelerator's run whose host's lateness added more than the
        scenario's ``max_overrun`` share to its training time (``late_share``:
        ``testbed.common.metrics.overruns``) is marked ``degraded`` (and warned), so its
        numbers are never reported as if the profile had held. Records without
        ``late_share`` (no ``step_s``) are judged by the share of overrun steps."""
        over = self.summary.get("overruns")
        acc = getattr(self.scn, "accelerator", None)
        if not over or acc is None or over.get("share") is None:
            return
        late = over.get("late_share")
        if late is not None and late > acc.max_overrun:
            why = (f"the host did not keep up with the emulated accelerator: its lateness "
                   f"added {100 * late:.1f} % to the training time (more than "
                   f"{100 * acc.max_overrun:g} %; {100 * over['share']:.1f} % of steps "
                   f"overran their slot); raise accelerator.dilation")
        elif late is None and over["share"] > acc.max_overrun:
            why = (f"the host did not keep up with the emulated accelerator: "
                   f"{100 * over['share']:.1f} % of steps overran their slot (more than "
                   f"{100 * acc.max_overrun:g} %); raise accelerator.dilation")
        else:
            return
        self.summary["degraded"] = why
        self.warnings.append(why)

    def _learning_verdict(self) -> str | None:
        """``summary.learning`` (``testbed.orchestration.health``); the reason to fail a
        run that did not learn, or None."""
        try:
            recs = worker_records.load_worker_records(self.folder.workers, self.scn.world_size)
        except Exception:  # noqa: BLE001 - a verdict needs records; without them, none
            return None
        verdict = health.learning(recs)
        if verdict is not None:
            self.summary["learning"] = verdict
            if not verdict["ok"]:
                return f"not learning: {verdict['why']}"
        return None

    def _no_space_text(self, reason: str) -> str | None:
        """A failure caused by a full (or read-only) results filesystem, cause first:
        workers and writers report it in their own words (errno 28 ...)."""
        if reason.startswith(("no space left", "read-only filesystem", "disk quota")):
            return None
        free = files.free_bytes(self.folder.path)
        said = any(m in reason for m in ("No space left", "Errno 28", "Disk quota",
                                         "Errno 122", "Read-only file system", "Errno 30"))
        if not said and (free is None or free >= LOW_SPACE_BYTES):
            return None  # (a worker whose log is on the full disk cannot say it)
        shown = "unknown" if free is None else files.human_bytes(free)
        return f"no space left on {self.folder.path} ({shown} free): {reason}"

    def _write_final(self, summary: dict[str, Any]) -> bool:
        """The final summary, however full the disk: the whole record; else, with the
        folder's reserve freed (rundir.RESERVE_NAME), the whole record, then its
        essentials; else the essentials in the place of the ``running`` record (whose
        blocks that frees). True when a final record is on disk; False leaves the
        registration for `netsense clean` to repair."""
        with self._final:
            if self._final_written:
                return True
            essentials = {k: summary.get(k) for k in (
                "scenario", "method", "seed", "run_id", "status", "reason", "started_at",
                "finished_at", "orchestrator", "prefix")}
            path = self.folder.path / "summary.json"
            for attempt in range(4):
                try:
                    if attempt == 1:
                        self.folder.release()
                    if attempt == 3:
                        path.unlink(missing_ok=True)
                    self.folder.write_summary(summary if attempt < 2 else essentials)
                    self._final_written = True
                    self.folder.release()
                    return True
                except OSError:
                    continue
            return False

    def _arm_overdue(self, signum: int) -> None:
        """A signal during teardown: give it ``signal_grace()``, then leave (``_overdue``)."""
        if self._overdue_timer is None:
            self._overdue_timer = threading.Timer(signal_grace(), self._overdue, (signum,))
            self._overdue_timer.daemon = True
            self._overdue_timer.start()

    def _overdue(self, signum: int) -> None:
        """Teardown outlived the signal's grace: write the true record and end the process
        (exit 128 + signum). What is left stays registered, marked abandoned, so
        `netsense clean` removes it."""
        step = self._teardown_step or "collecting results"
        why = (f"interrupted by {signal.Signals(signum).name}; teardown did not finish "
               f"within {signal_grace():g} s (at: {step}); `netsense clean` removes what "
               "is left")
        self._abandon(why)
        summary = dict(self.summary, status="failed", reason=why, **self._final_fields(),
                       finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        if self._write_final(summary):
            leftovers.unregister_run(self._registration)
        self.progress.close(f"failed: {why}")
        os._exit(128 + signum)

    def _record_phases(self) -> None:
        """``phases_s`` and ``overhead_s`` (worker_records.phase_breakdown); never fails the run."""
        try:
            recs = worker_records.load_worker_records(self.folder.workers, self.scn.world_size)
            self.summary.update(worker_records.phase_breakdown(
                recs, launch_wall=self.launch_wall, wall_s=self.summary["wall_s"],
                build_s=self.timing.get("build_s"), teardown_s=self.timing.get("teardown_s"),
                workers_done_wall=self.timing.get("workers_done_wall"),
                zygote_wait_s=self.timing.get("zygote_wait_s"), dilation=self.dilation))
        except Exception as exc:  # noqa: BLE001 - timing is information, not the result
            self.summary["phases_error"] = f"{type(exc).__name__}: {exc}"

    def execute(self) -> RunOutcome:
        self.signals.install()
        try:
            self._make_config()  # RunInterrupted here: nothing written, nothing to undo
            self.signals.protect()
            self._begin()
        except BaseException:
            self.signals.restore()
            raise
        interrupted: RunInterrupted | None = None
        status, reason = "failed", None
        t_start = time.monotonic()
        try:
            self.signals.unprotect()  # a signal during _begin is raised here
            self._work()
            status = "ok"
        except RunInterrupted as exc:
            interrupted, reason = exc, f"interrupted by {signal.Signals(exc.signum).name}"
        except KeyboardInterrupt:
            interrupted, reason = RunInterrupted(signal.SIGINT), "interrupted by SIGINT"
        except (RunFailed, files.NoSpace) as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - recorded, the run is failed, the sweep goes on
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
            try:
                (self.folder.path / "orchestrator-error.txt").write_text(traceback.format_exc())
            except OSError:
                pass  # the reason is in the summary; the traceback is a bonus
        finally:
            self.signals.protect()  # from here on signals are remembered, never raised
            self.signals.on_late = self._arm_overdue
            if self.signals.pending is not None:  # the interruption that ends the work
                self._arm_overdue(self.signals.pending)
            try:
                self._finish(status, reason, t_start)
            finally:
                if self._overdue_timer is not None:
                    self._overdue_timer.cancel()
                self.signals.on_late = None
                self.signals.restore()
                self.progress.close(final_line(self.summary))
        if interrupted is None and self.signals.pending is not None:
            interrupted = RunInterrupted(self.signals.pending)
        if interrupted is not None:
            raise interrupted
        return RunOutcome(self.folder.path, self.summary["status"], self.summary)


def final_line(s: dict[str, Any]) -> str:
    """The progress line's last words for one run."""
    warns = "".join(f"\n  WARNING: {w}" for w in s.get("warnings", []))
    if s.get("status") == "ok":
        tp = s.get("throughput_samples_per_s")
        build = f"  build {s['build_s']} s" if s.get("build_s") is not None else ""
        return (f"ok  {s.get('steps')} steps  {tp:.1f} samples/s{build}  "
                f"teardown {s.get('teardown_s')} s" if tp else "ok") + warns
    return f"{s.get('status')}: {s.get('reason')}" + warns
