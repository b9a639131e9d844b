"""A ramp in the paced simulation against its emulated runs (``testbed.simulation.paced_ramp``).

Why these: the paper ramp's prediction (``benchmarks/sim_ramp.py``) will be held against its
emulated runs by this comparison, so the comparison itself is checked here on ramp runs
that exist already -- the committed ``accel-ramp`` runs of the sustained-filter A/B (an
emulated A100's MLP on a 1+1 dumbbell, iperf3 at 1, 2, 4, 8, 16 streams, NetSenseML): the
two sides share a clock (the run's timeline events sit at their ``at_s`` after its first
step), the throughput per window adds up to the run's own samples, and the level agreement
is exact where it can be computed by hand. None of the data below is made up but the one
changed level of a real run's copy.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.simulation import engine, paced
from testbed.simulation import paced_ramp as pr

ROOT = Path(__file__).resolve().parents[2]
RAMP_RUNS = ROOT / "results" / "runs" / "policy-changes" / "sustained-filter" / "accel-ramp"
ONE = RAMP_RUNS / "netsenseml" / "accel-ramp" / "20261207-133236-netsenseml-s0"
needs_simgrid = pytest.mark.skipif(not engine.available(),
                                   reason="simgrid not importable (make setup installs it)")


def _timeline(scenario: str) -> list[dict]:
    import yaml

    return yaml.safe_load((ROOT / "testbed" / "scenarios" / f"{scenario}.yaml").read_text())[
        "timeline"]


def test_the_paper_ramp_is_cut_into_its_levels_and_pauses() -> None:
    ws = pr.windows(_timeline("paper-ramp30"))
    assert [(w.label, w.start_s, w.end_s, w.streams) for w in ws] == [
        ("idle", 0.0, 10.0, 0), ("1 streams", 10.0, 40.0, 1), ("pause", 40.0, 50.0, 0),
        ("10 streams", 50.0, 80.0, 10), ("pause", 80.0, 90.0, 0),
        ("20 streams", 90.0, 120.0, 20), ("pause", 120.0, 130.0, 0),
        ("30 streams", 130.0, 160.0, 30), ("pause", 160.0, 170.0, 0),
        ("40 streams", 170.0, 200.0, 40), ("pause", 200.0, 210.0, 0),
        ("50 streams", 210.0, 240.0, 50), ("after", 240.0, None, 0)]


def test_concurrent_streams_add_up_and_other_events_are_refused() -> None:
    ws = pr.windows([
        {"at_s": 0, "kind": "cross_start", "id": "a", "streams": 2},
        {"at_s": 5, "kind": "cross_start", "id": "b", "streams": 3},
        {"at_s": 8, "kind": "cross_stop", "id": "a"}])
    assert [(w.label, w.start_s, w.end_s) for w in ws] == [
        ("2 streams", 0.0, 5.0), ("5 streams", 5.0, 8.0), ("3 streams", 8.0, None)]
    with pytest.raises(ValueError, match="set_rate"):
        pr.windows([{"at_s": 1, "kind": "set_rate", "link": "x", "rate_mbit": 1}])


def test_a_runs_timeline_runs_on_the_clock_of_its_first_step() -> None:
    """events.csv's schedule is at_s after the first step's end (steps.csv ``t``): the
    track's 0."""
    with (ONE / "steps.csv").open(newline="") as fh:
        first = next(r for r in csv.DictReader(fh) if r["rank"] == "0")
    with (ONE / "events.csv").open(newline="") as fh:
        events = list(csv.DictReader(fh))
    timeline = json.loads((ONE / "config.json").read_text())["scenario"]["timeline"]
    assert events
    for ev, spec in zip(events, timeline, strict=False):
        assert float(ev["t_scheduled"]) == pytest.approx(float(first["t"]) + spec["at_s"],
                                                         abs=1e-4)


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "steps.csv").open(newline="") as fh:
        return sorted((r for r in csv.DictReader(fh) if r["rank"] == "0"),
                      key=lambda r: float(r["t"]))


@pytest.mark.parametrize("run", sorted(p.parent for p in RAMP_RUNS.rglob("steps.csv")),
                         ids=lambda p: p.name)
def test_the_windows_throughput_adds_up_to_the_runs_samples(run: Path) -> None:
    """Over the whole run: (steps after the first) x samples / (last end - first end);
    per window, throughput x covered length sums to the same samples."""
    rows = _rows(run)
    track = pr.emulated_track(run)
    span = float(rows[-1]["t"]) - float(rows[0]["t"])
    samples = sum(float(r["samples"]) for r in rows[1:])
    whole, cover = pr.throughput(track, 0.0, track.end_s)
    assert cover == 1.0 and whole == pytest.approx(samples / span, rel=1e-9)
    total = 0.0
    for w in pr.windows(json.loads((run / "config.json").read_text())["scenario"]["timeline"]):
        a, b = w.bounds(track.end_s)
        thr, cov = pr.throughput(track, a, b)
        if b > a and thr is not None:
            total += thr * cov * (b - a)
    assert total == pytest.approx(samples, rel=1e-9)


def test_the_level_share_is_the_time_of_the_steps_that_agree() -> None:
    track = pr.emulated_track(ONE)
    assert pr.level_share(track, track) == 1.0
    steps = list(track.steps)
    i = max(range(len(steps)), key=lambda j: steps[j].end_s - (steps[j - 1].end_s if j else 0))
    changed = pr.Track([replace(s, level="fp16") if j == i else s for j, s in enumerate(steps)])
    length = steps[i].end_s - (steps[i - 1].end_s if i else 0.0)
    assert pr.level_share(track, changed) == pytest.approx(1 - length / track.end_s, rel=1e-9)
    # a top-k ratio 2 % off is the same level, 5 % off another
    near = pr.Track([replace(s, ratio=s.ratio * 1.015) for s in steps])
    far = pr.Track([replace(s, ratio=s.ratio * 1.05) for s in steps])
    topk = sum(b - a for a, b, s in track.spans() if s.level == "topk")
    assert topk > 0
    assert pr.level_share(track, near) == 1.0
    assert pr.level_share(track, far) == pytest.approx(1 - topk / track.end_s, rel=1e-9)


def test_a_later_track_is_read_as_far_as_both_go() -> None:
    track = pr.emulated_track(ONE)
    half = pr.Track([s for s in track.steps if s.end_s <= track.end_s / 2])
    assert pr.level_share(track, half) == 1.0
    thr, cover = pr.throughput(half, 0.0, track.end_s)
    assert thr is not None and cover == pytest.approx(half.end_s / track.end_s)


@needs_simgrid
def test_a_ramp_run_against_its_own_simulation() -> None:
    """The committed run simulated from its config.json: the windows it reached, its k,
    and the simulated policy's level on most of its time (int8 with top-k probes)."""
    job = paced.from_run(ONE)
    res = paced.simulate_isolated([job])[0]
    comp = pr.compare_run(ONE, ONE.name, job, res, {(job.model, job.method, 0.04): 600000.0})
    assert comp.k == json.loads((ONE / "config.json").read_text())["accelerator"]["dilation"]
    assert [r.window.label for r in comp.rows] == ["idle", "1 streams", "pause"]
    counted = [r for r in comp.rows if r.error_pct is not None]
    assert [r.window.label for r in counted] == ["idle", "1 streams"]  # the run ends in the pause
    assert all(abs(r.error_pct) < 50 for r in counted)  # type: ignore[arg-type]
    assert comp.rows[1].predicted == 600000.0 and comp.rows[1].prediction_error_pct is not None
    assert comp.levels_same is not None and 0.8 < comp.levels_same <= 1.0
    line = pr.summary([comp])
    assert any(s.startswith("levels same: 1 adaptive runs") for s in line)

