"""The timeline: scenario events expanded into timed actions, applied on wall-clock time.

Expansion is pure (unit-testable without a network): a ``set_rate`` is one action; a
``cross_start`` is one client start; a ``ramp`` is one client start per level (each adds
the increment over the previous level) plus an optional stop; a ``trace`` is one
``set_rate`` per rate change. The flow plan (which iperf3 clients with how many streams)
comes out of the same pass so that all servers can be started before training.

At run time a daemon thread sleeps until each action's time and applies it. Times are
seconds since the workers were launched (the run's origin, also used for steps.csv ``t``),
so events.csv and steps.csv line up. Each action is logged with its scheduled and its
applied time; the gap is the timeline's own latency, worth seeing on a loaded machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.config.scenario import CrossStart, CrossStop, Ramp, SetRate, Trace
from testbed.config.traces import parse_trace, trace_rate_changes


@dataclass(frozen=True)
class Action:
    """One thing to do at ``at`` seconds after the timeline origin."""

    at: float
    kind: str  # set_rate | cross_start | cross_stop
    target: str  # link name or flow-group id
    value: float | int | None = None  # Mbit/s, or streams added
    slot: int = 0  # cross_start: which client of the group
    source: str = ""  # the scenario event it came from, e.g. "timeline[2] ramp"


@dataclass(frozen=True)
class FlowPlan:
    """iperf3 clients a flow group will need: one entry per client process."""

    id: str
    src: str
    dst: str
    streams: list[int]
    bitrate_mbit: float | None = None


@dataclass
class EventRecord:
    t_scheduled: float
    t_applied: float | None
    kind: str
    target: str
    value: float | int | None
    detail: str


EVENT_COLUMNS = ["t_scheduled", "t_applied", "kind", "target", "value", "detail"]


def expand(events: Sequence[SetRate | CrossStart | CrossStop | Ramp | Trace]) -> tuple[
    list[Action], list[FlowPlan]
]:
    """Scenario events -> (actions sorted by time, flow plans)."""
    actions: list[Action] = []
    plans: list[FlowPlan] = []
    for i, ev in enumerate(events):
        src = f"timeline[{i}] {ev.kind}"
        if isinstance(ev, SetRate):
            actions.append(Action(ev.at_s, "set_rate", ev.link, ev.rate_mbit, source=src))
        elif isinstance(ev, CrossStart):
            plans.append(FlowPlan(ev.id, ev.src, ev.dst, [ev.streams], ev.bitrate_mbit))
            actions.append(Action(ev.at_s, "cross_start", ev.id, ev.streams, 0, src))
        elif isinstance(ev, CrossStop):
            actions.append(Action(ev.at_s, "cross_stop", ev.id, source=src))
        elif isinstance(ev, Ramp):
            levels = ev.levels()
            adds = [levels[0]] + [b - a for a, b in zip(levels, levels[1:], strict=False)]
            plans.append(FlowPlan(ev.id, ev.src, ev.dst, adds))
            for k, add in enumerate(adds):
                actions.append(Action(ev.at_s + k * ev.every_s, "cross_start", ev.id, add, k, src))
            if ev.hold_s is not None:
                end = ev.at_s + (len(adds) - 1) * ev.every_s + ev.hold_s
                actions.append(Action(end, "cross_stop", ev.id, source=src))
        elif isinstance(ev, Trace):
            rows = parse_trace(Path(ev.file), ev.format, bin_ms=ev.bin_ms)
            changes = trace_rate_changes(
                rows, scale=ev.scale, min_mbit=ev.min_mbit, duration_s=ev.duration_s
            )
            for t, mbit in changes:
                actions.append(Action(ev.at_s + t, "set_rate", ev.link, round(mbit, 4), source=src))
    # Stable sort: equal times keep file order (e.g. a stop listed after a start).
    actions.sort(key=lambda a: a.at)
    return actions, plans


class Timeline:
    """Applies actions on wall-clock time in a daemon thread and records each one.

    ``apply(action) -> detail`` does the work (the orchestrator binds it to the
    emulation and the cross-traffic object). An exception is recorded in the event's
    detail and kept in ``error``; the remaining actions still run, and the orchestrator
    fails the run, because a scenario whose events did not happen did not run.
    """

    def __init__(self, actions: list[Action], apply: Callable[[Action], str]) -> None:
        self.actions = actions
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
        for action in self.actions:
            due = origin + action.at
            if self._stop.wait(max(0.0, due - time.time())):
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
                        round(t_sched, 4),
                        round(time.time() - self.launch_wall, 4),
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
