"""The timeline: scenario events expanded into timed actions, applied on wall-clock time.

Each event kind expands itself (``testbed.config.events``: the registry of kinds, pure and
unit-testable without a network); this module applies the resulting actions.

At run time a daemon thread sleeps until each action's time and applies it. Times are
seconds since the workers were launched (the run's origin, also used for steps.csv ``t``),
so events.csv and steps.csv line up. Each action is logged with its scheduled and its
applied time; the gap is the timeline's own latency, worth seeing on a loaded machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from netsenseml.dilation import NONE, Dilation
from testbed.config.events import Action, FlowPlan, expand


@dataclass
class EventRecord:
    t_scheduled: float
    t_applied: float | None
    kind: str
    target: str
    value: float | int | None
    detail: str


EVENT_COLUMNS = ["t_scheduled", "t_applied", "kind", "target", "value", "detail"]

__all__ = ["EVENT_COLUMNS", "Action", "EventRecord", "FlowPlan", "Timeline", "expand"]


class Timeline:
    """Applies actions on wall-clock time in a daemon thread and records each one.

    ``apply(action) -> detail`` does the work (the orchestrator binds it to the
    emulation and the cross-traffic object). An exception is recorded in the event's
    detail and kept in ``error``; the remaining actions still run, and the orchestrator
    fails the run, because a scenario whose events did not happen did not run.
    """

    def __init__(self, actions: list[Action], apply: Callable[[Action], str],
                 dilation: Dilation | float = NONE) -> None:
        """``dilation``: the run's time dilation; actions are due at ``at x k`` real
        seconds and recorded in virtual seconds (``testbed.orchestration.dilation``)."""
        self.actions = actions
        self.dilation = Dilation.of(dilation)
        self._apply = apply
        self.records: list[EventRecord] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.launch_wall = 0.0

    def start(self, launch_wall: float, origin_wall: float | None = None) -> None:
        """Start applying; times count from ``origin_wall`` (default: launch)."""
        self.launch_wall = launch_wall
        origin = launch_wall if origin_wall is None else origin_wall
        self._thread = threading.Thread(
            target=self._run, args=(origin,), name="netsense-timeline", daemon=True
        )
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def pending(self) -> int:
        return len(self.actions) - len(self.records)

    def _run(self, origin: float) -> None:
        """The thread's body: never lets an exception out (it would print a traceback on
        the user's terminal); any error is kept in ``error`` and fails the run."""
        try:
            self._apply_all(origin)
        except BaseException as exc:  # noqa: BLE001 - recorded, the run is failed by caller
            if self.error is None:
                self.error = f"timeline thread: {type(exc).__name__}: {exc}"

    def _apply_all(self, origin: float) -> None:
        for action in self.actions:
            due = origin + self.dilation.real_s(action.at)
            # wait in bounded slices: threading's wait() overflows on huge timeouts
            while True:
                left = due - time.time()
                if left <= 0:
                    break
                if self._stop.wait(min(left, 60.0)):
                    return
            if self._stop.is_set():
                return
            t_sched = due - self.launch_wall
            try:
                detail = self._apply(action)
            except Exception as exc:  # noqa: BLE001 - recorded, run is failed by caller
                detail = f"error: {type(exc).__name__}: {exc}"
                if self.error is None:
                    self.error = f"{action.source} at {action.at:g} s: {detail}"
            with self._lock:
                self.records.append(
                    EventRecord(
                        round(self.dilation.virtual_s(t_sched), 4),
                        round(self.dilation.virtual_s(time.time() - self.launch_wall), 4),
                        action.kind,
                        action.target,
                        action.value,
                        detail,
                    )
                )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop before the next action; waits for an action in progress to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def snapshot(self) -> list[EventRecord]:
        with self._lock:
            return list(self.records)


@dataclass
class TimelineSummary:
    applied: int = 0
    scheduled: int = 0
    max_lag_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def summarize(records: list[EventRecord], n_actions: int) -> TimelineSummary:
    lags = [r.t_applied - r.t_scheduled for r in records if r.t_applied is not None]
    return TimelineSummary(
        applied=len(records),
        scheduled=n_actions,
        max_lag_s=round(max(lags), 4) if lags else 0.0,
        errors=[r.detail for r in records if r.detail.startswith("error")],
    )
