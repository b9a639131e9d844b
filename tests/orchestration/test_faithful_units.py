"""The faithful-range warning from a scenario's configured rates (no emulation): the rate
training sees is the lowest over the links it crosses, and every set_rate on them counts."""

from __future__ import annotations

import pytest

from testbed.config import faithful
from testbed.config.scenario import load_scenario
from testbed.emulation import loaded_goodput


def _dump(name: str) -> dict:
    return load_scenario(name, skip_kernel_checks=True).model_dump(mode="json")


def test_committed_crossover_scenarios_are_inside_the_range(monkeypatch) -> None:
    monkeypatch.delenv(faithful.ENV, raising=False)
    for name in ("xover-static", "xover-d10", "xover-d30", "xover-d50", "xover-d70",
                 "xover-ramp", "xover-star4-d50", "xover-db22-d50"):
        assert faithful.warning(_dump(name)) is None, name


def test_a_bottleneck_above_the_range_warns_and_slow_access_links_hide_it(monkeypatch) -> None:
    monkeypatch.delenv(faithful.ENV, raising=False)
    d = _dump("xover-static")
    d["topology"]["bottleneck_mbit"] = 3000.0
    w = faithful.warning(d)
    assert w and "3000 Mbit/s is above the emulation's faithful range (1000 Mbit/s" in w
    d["topology"]["access_mbit"] = 500.0  # training is then limited to 500 Mbit/s
    assert faithful.warning(d) is None


def test_set_rate_events_count_and_the_limit_can_be_stated(monkeypatch) -> None:
    d = _dump("xover-d50")
    d["timeline"].append({"at_s": 30.0, "kind": "set_rate", "link": "bottleneck",
                          "rate_mbit": 2500.0})
    monkeypatch.delenv(faithful.ENV, raising=False)
    assert "2500 Mbit/s" in faithful.warning(d)
    monkeypatch.setenv(faithful.ENV, "5000")
    assert faithful.warning(d) is None
    monkeypatch.setenv(faithful.ENV, "150")
    assert "200, 1000, 2500 Mbit/s" in faithful.warning(d)
    monkeypatch.setenv(faithful.ENV, "bogus")
    assert faithful.faithful_mbit() == pytest.approx(faithful.FAITHFUL_MBIT)


def test_check_compares_with_the_reference_efficiency() -> None:
    ok, line = loaded_goodput.check([(100.0, 0.958), (1000.0, 0.93)])
    assert ok and "97.1% of the reference" in line
    ok, _ = loaded_goodput.check([(100.0, 0.958), (3000.0, 0.85)])
    assert not ok
