"""The timeline's event-kind registry: every registered kind is in the schema, checks itself
against the topology's names, and expands only into actions the orchestrator can apply."""

from __future__ import annotations

import typing

import pytest

from testbed.config import events
from testbed.config.scenario import Scenario, ScenarioError, validate_scenario
from testbed.orchestration.run import ACTIONS

BASE = {"name": "t", "topology": {"kind": "star", "n_workers": 2, "n_cross": 1, "rate_mbit": 50},
        "workload": {"steps": 2}, "methods": ["allreduce"]}
ONE_OF_EACH = [
    {"at": 0, "kind": "set_rate", "link": "w0", "mbit": 20},
    {"at": 1, "kind": "cross_start", "id": "a", "src": "x0", "dst": "w1", "streams": 2},
    {"at": 2, "kind": "ramp", "id": "b", "src": "w0", "dst": "x0", "max_streams": 3,
     "step_streams": 1, "every_s": 1, "hold_s": 1},
    {"at": 3, "kind": "cross_stop", "id": "a"},
]


def test_every_registered_kind_is_in_the_schema_and_its_actions_can_be_applied():
    union = typing.get_args(typing.get_args(Scenario.model_fields["timeline"].annotation)[0])
    assert set(typing.get_args(union[0])) == set(events.EVENTS)
    assert set(events.ACTION_KINDS) == set(ACTIONS)
    scn = validate_scenario({**BASE, "timeline": ONE_OF_EACH}, skip_kernel_checks=True)
    actions, plans = events.expand(scn.timeline)
    assert {a.kind for a in actions} <= set(events.ACTION_KINDS)
    assert [a.at for a in actions] == sorted(a.at for a in actions)
    assert [p.id for p in plans] == ["a", "b"] and plans[1].streams == [1, 1, 1]
    assert actions[-1] == events.Action(5.0, "cross_stop", "b", source="timeline[2] ramp")


@pytest.mark.parametrize("event,needle", [
    ({"at": 0, "kind": "set_rate", "link": "bottleneck", "mbit": 5},
     "timeline[0] (set_rate): unknown link 'bottleneck'; links: w0, w1, x0"),
    ({"at": 0, "kind": "cross_start", "id": "a", "src": "w0", "dst": "w0"},
     "timeline[0] (cross_start): src and dst are the same host"),
    ({"at": 0, "kind": "ramp", "id": "a", "src": "w9", "dst": "w0"},
     "timeline[0] (ramp): unknown src host 'w9'; hosts: w0, w1, x0"),
    ({"at": 0, "kind": "cross_stop", "id": "zz"},
     "timeline[0] (cross_stop): no earlier cross_start/ramp with id 'zz'"),
    ({"at": 0, "kind": "flap", "link": "w0"}, "timeline[0]"),
])
def test_event_checks_are_one_line_naming_the_event(event, needle):
    with pytest.raises(ScenarioError) as err:
        validate_scenario({**BASE, "timeline": [event]}, skip_kernel_checks=True)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
