"""Timeline event kinds: each is one class here, with its fields (the schema), its checks
against the topology's names, and the timed actions it expands into.

Why one class per kind holds all three: adding an event kind is then this one file (the
class and its line in ``EVENTS``). Events expand into a few primitive actions that the
orchestrator knows how to apply (``ACTION_KINDS``: change a link's rate, start one
iperf3 client of a flow group, stop a group); a kind made of these needs nothing else. A
new primitive also needs its apply function in ``testbed.orchestration.run``'s action table.

Expansion is pure (no network, unit-testable): a ``set_rate`` is one action; a
``cross_start`` one client start; a ``ramp`` one client start per level (each adds the
increment over the previous level) plus an optional stop; a ``trace`` one ``set_rate``
per rate change. The flow plans (which iperf3 clients with how many streams) come out of
the same pass, so that every server is started before training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, ValidationInfo, model_validator

from testbed.common.names import NAME_RE
from testbed.common.schema import StrictModel
from testbed.config.traces import TraceError, parse_trace, trace_rate_changes

#: HTB rates tc can take: below 10 kbit/s the burst/quantum arithmetic degenerates.
MIN_MBIT = 0.01
MAX_MBIT = 100000.0
#: Longest run the schema accepts (time limit, timeouts, event times): a week.
MAX_SECONDS = 7 * 24 * 3600.0
#: Longest flow-group id (it names iperf3 log files: ``<id>-<port>-client.log``).
MAX_ID_LEN = 64

#: The primitive actions a run applies (``testbed.orchestration.run``).
ACTION_KINDS = ("set_rate", "cross_start", "cross_stop")


@dataclass(frozen=True)
class Action:
    """One thing to do at ``at`` seconds after the timeline origin."""

    at: float
    kind: str  # one of ACTION_KINDS
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
class Names:
    """What an event is checked against: the topology's names, and the flow-group ids the
    events before it defined (filled in as the timeline is checked, in file order)."""

    links: list[str]
    hosts: list[str]
    groups: set[str] = field(default_factory=set)

    def link(self, name: str) -> None:
        if name not in self.links:
            raise ValueError(f"unknown link {name!r}; links: {', '.join(self.links)}")

    def flow(self, src: str, dst: str, group: str) -> None:
        for role, host in (("src", src), ("dst", dst)):
            if host not in self.hosts:
                raise ValueError(f"unknown {role} host {host!r}; hosts: {', '.join(self.hosts)}")
        if src == dst:
            raise ValueError("src and dst are the same host")
        if group in self.groups:
            raise ValueError(f"duplicate id {group!r}")
        self.groups.add(group)


class TimelineEvent(StrictModel):
    """Base of an event kind: ``at`` plus the kind's fields; ``check`` and ``expand``."""

    at_s: float = Field(ge=0, le=MAX_SECONDS, description="When it happens: seconds after the timeline origin (timeline_origin)")

    def check(self, names: Names) -> None:
        """Raise ValueError (one line) when the event names what the topology lacks."""

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        raise NotImplementedError(type(self).__name__)


class SetRate(TimelineEvent):
    """Change a shaped link's rate in place (tc class change)."""

    kind: Literal["set_rate"]
    """set_rate: change a link's rate."""
    link: str
    """The link to change: a link name of the topology (`netsense show SCENARIO` lists them)."""
    rate_mbit: float = Field(ge=MIN_MBIT, le=MAX_MBIT)
    """The new rate, Mbit/s."""

    def check(self, names: Names) -> None:
        names.link(self.link)

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        return [Action(self.at_s, "set_rate", self.link, self.rate_mbit, source=source)], []


class CrossStart(TimelineEvent):
    """Start a group of N parallel iperf3 TCP streams from src to dst."""

    kind: Literal["cross_start"]
    """cross_start: start iperf3 cross traffic."""
    id: str = Field(pattern=NAME_RE.pattern, max_length=MAX_ID_LEN)
    """Name of this flow group, used by cross_stop."""
    src: str
    """Host the iperf3 client runs on (a host of the topology, e.g. x0)."""
    dst: str
    """Host the iperf3 server runs on."""
    streams: int = Field(1, gt=0, le=128)
    """Parallel TCP streams (iperf3 -P). Default 1."""
    bitrate_mbit: float | None = Field(None, ge=0.001, le=MAX_MBIT,
                                       description="Per-stream cap, Mbit/s (iperf3 -b); none: as fast as TCP goes")

    def check(self, names: Names) -> None:
        names.flow(self.src, self.dst, self.id)

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        plan = FlowPlan(self.id, self.src, self.dst, [self.streams], self.bitrate_mbit)
        return [Action(self.at_s, "cross_start", self.id, self.streams, 0, source)], [plan]


class CrossStop(TimelineEvent):
    """Stop every iperf3 client of a cross_start or ramp group."""

    kind: Literal["cross_stop"]
    """cross_stop: stop a cross-traffic group."""
    id: str = Field(max_length=MAX_ID_LEN)
    """The cross_start or ramp id to stop."""

    def check(self, names: Names) -> None:
        if self.id not in names.groups:
            raise ValueError(f"no earlier cross_start/ramp with id {self.id!r}")

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        return [Action(self.at_s, "cross_stop", self.id, source=source)], []


class Ramp(TimelineEvent):
    """The paper's congestion ramp: parallel streams rising step by step.

    Levels are start_streams, then each multiple of step_streams above it, up to
    max_streams (1, 10, 20, ..., 50 with step 10; 1, 2, ..., 50 with step 1), one level
    every every_s seconds. Each level adds one iperf3 client carrying the increment
    (iperf3 fixes -P per process), so the process count stays at the number of levels.
    """

    kind: Literal["ramp"]
    """ramp: the paper's congestion ramp of rising parallel streams."""
    id: str = Field(pattern=NAME_RE.pattern, max_length=MAX_ID_LEN)
    """Name of this flow group, used by cross_stop."""
    src: str
    """Host the iperf3 clients run on."""
    dst: str
    """Host the iperf3 servers run on."""
    start_streams: int = Field(1, gt=0, le=128)
    """Streams at the first level. Default 1."""
    max_streams: int = Field(50, gt=0, le=1024)
    """Streams at the last level. Default 50."""
    step_streams: int = Field(10, gt=0, le=128)
    """Streams added per level. Default 10."""
    every_s: float = Field(10.0, gt=0, le=MAX_SECONDS)
    """Seconds each level lasts before the next. Default 10."""
    hold_s: float | None = Field(None, ge=0, le=MAX_SECONDS,
                                 description="Seconds the last level is held before the ramp stops; none: until the end")

    @model_validator(mode="after")
    def _order(self) -> Ramp:
        if self.max_streams < self.start_streams:
            raise ValueError(
                f"max_streams ({self.max_streams}) < start_streams ({self.start_streams})"
            )
        return self

    def last_level_at(self) -> float:
        return self.at_s + (len(self.levels()) - 1) * self.every_s

    def stop_at(self) -> float | None:
        return None if self.hold_s is None else self.last_level_at() + self.hold_s

    def levels(self) -> list[int]:
        """Total stream counts at each step."""
        out = [self.start_streams]
        k = 1
        while k * self.step_streams <= self.max_streams:
            if k * self.step_streams > out[-1]:
                out.append(k * self.step_streams)
            k += 1
        if out[-1] != self.max_streams:
            out.append(self.max_streams)
        return out

    def check(self, names: Names) -> None:
        names.flow(self.src, self.dst, self.id)

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        levels = self.levels()
        adds = [levels[0]] + [b - a for a, b in zip(levels, levels[1:], strict=False)]
        actions = [Action(self.at_s + k * self.every_s, "cross_start", self.id, add, k, source)
                   for k, add in enumerate(adds)]
        if self.hold_s is not None:
            end = self.at_s + (len(adds) - 1) * self.every_s + self.hold_s
            actions.append(Action(end, "cross_stop", self.id, source=source))
        return actions, [FlowPlan(self.id, self.src, self.dst, adds)]


class Trace(TimelineEvent):
    """Replay a bandwidth trace on a link as a series of rate changes.

    ``csv``: lines ``time,rate`` (seconds, Mbit/s), optional header. ``mahimahi``: one
    line per packet-delivery opportunity, in ms (each one MTU of 1500 bytes), binned
    into ``bin_ms`` windows to give a rate. Rates are multiplied by ``scale`` and floored
    at ``min_mbit`` (an HTB class cannot have rate 0).
    """

    kind: Literal["trace"]
    """trace: replay a bandwidth trace on a link."""
    link: str
    """The link the trace shapes."""
    file: str = Field(min_length=1, max_length=4096)
    """Trace file, relative to the scenario file or testbed/scenarios/traces."""
    format: Literal["csv", "mahimahi"] = "csv"
    """csv (time_s,rate_mbit lines) or mahimahi (one delivery opportunity per line, in ms). Default csv."""
    scale: float = Field(1.0, gt=0, le=1e6)
    """Factor applied to every rate of the trace. Default 1."""
    min_mbit: float = Field(0.1, ge=MIN_MBIT, le=MAX_MBIT)
    """Lowest rate set, Mbit/s (HTB cannot be 0). Default 0.1."""
    bin_ms: int = Field(1000, ge=10, le=3_600_000)
    """Milliseconds per rate change (a mahimahi trace is counted in bins of this). Default 1000."""
    duration_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="Seconds to replay, looping the trace; none: once"
    )

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Trace:
        base = (info.context or {}).get("base_dir") or Path.cwd()
        path = Path(self.file).expanduser()
        if not path.is_absolute():
            path = Path(base) / path
        if not path.is_file():
            raise ValueError(f"trace file not found: {path}")
        try:
            rows = parse_trace(path, self.format, bin_ms=self.bin_ms)
            trace_rate_changes(rows, scale=self.scale, min_mbit=self.min_mbit,
                               duration_s=self.duration_s)
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        top = max((rate for _, rate in rows), default=0.0) * self.scale
        if top > MAX_MBIT:
            raise ValueError(f"{path.name}: rate x scale reaches {top:g} Mbit/s, above the "
                             f"{MAX_MBIT:g} accepted")
        self.file = str(path.resolve())
        return self

    def check(self, names: Names) -> None:
        names.link(self.link)

    def expand(self, source: str, end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
        rows = parse_trace(Path(self.file), self.format, bin_ms=self.bin_ms)
        changes = trace_rate_changes(rows, scale=self.scale, min_mbit=self.min_mbit,
                                     duration_s=self.duration_s,
                                     end_s=None if end_s is None else end_s - self.at_s)
        return [Action(self.at_s + t, "set_rate", self.link, round(mbit, 4), source=source)
                for t, mbit in changes], []


#: The registered event kinds: one line each; the ``kind`` literal of each class is its name.
EVENTS: list[type[TimelineEvent]] = [SetRate, CrossStart, CrossStop, Ramp, Trace]

EVENT_KINDS = tuple(cls.model_fields["kind"].annotation.__args__[0] for cls in EVENTS)

Event = Annotated[Union[tuple(EVENTS)], Field(discriminator="kind")]  # noqa: UP007


def expand(events: list[TimelineEvent],
           end_s: float | None = None) -> tuple[list[Action], list[FlowPlan]]:
    """Scenario events -> (actions sorted by time, flow plans).

    ``end_s``: the run's end (its time limit); a trace's rate changes from then on are cut
    (the schema refuses every other event that late).
    """
    actions: list[Action] = []
    plans: list[FlowPlan] = []
    for i, ev in enumerate(events):
        more, flows = ev.expand(f"timeline[{i}] {ev.kind}", end_s=end_s)
        actions += more
        plans += flows
    # Stable sort: equal times keep file order (e.g. a stop listed after a start).
    actions.sort(key=lambda a: a.at)
    return actions, plans
