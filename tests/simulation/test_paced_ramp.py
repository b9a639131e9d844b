"""A ramp in the paced simulation against its emulated runs (``testbed.simulation.paced_ramp``).

Why these: the paper ramp's prediction (``benchmarks/sim_ramp.py``) will be held against its
emulated runs by this comparison, so the comparison itself is checked here on ramp runs
that exist already -- the committed ``accel-ramp`` runs of the sustained-filter A/B (an
emulated A100's MLP on a 1+1 dumbbell, iperf3 at 1, 2, 4, 8, 16 streams, NetSenseML): the
two sides share a clock (the run's timeline events sit at their ``at_s`` after its first
step) and the level agreement is exact where it can be computed by hand. None of the data
below is made up but the one changed level of a real run's copy. The windows, the tracks and
the throughput per window are the analysis' (``testbed.analysis.ramp``;
tests/analysis/test_ramp.py holds them).
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.analysis import ramp
from testbed.simulation import engine, paced
from testbed.simulation import paced_ramp as pr

ROOT = Path(__file__).resolve().parents[2]
RAMP_RUNS = ROOT / "results" / "runs" / "policy-changes" / "sustained-filter" / "accel-ramp"
ONE = RAMP_RUNS / "netsenseml" / "accel-ramp" / "20261207-133236-netsenseml-s0"
needs_simgrid = pytest.mark.skipif(not engine.available(),
                                   reason="simgrid not importable (make setup installs it)")


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


def test_the_level_share_is_the_time_of_the_steps_that_agree() -> None:
    track = pr.emulated_track(ONE)
    assert pr.level_share(track, track) == 1.0
    steps = list(track.steps)
    i = max(range(len(steps)), key=lambda j: steps[j].end_s - (steps[j - 1].end_s if j else 0))
    changed = ramp.Track([replace(s, level="fp16") if j == i else s for j, s in enumerate(steps)])
    length = steps[i].end_s - (steps[i - 1].end_s if i else 0.0)
    assert pr.level_share(track, changed) == pytest.approx(1 - length / track.end_s, rel=1e-9)
    # a top-k ratio 2 % off is the same level, 5 % off another
    near = ramp.Track([replace(s, ratio=s.ratio * 1.015) for s in steps])
    far = ramp.Track([replace(s, ratio=s.ratio * 1.05) for s in steps])
    topk = sum(b - a for a, b, s in track.spans() if s.level == "topk")
    assert topk > 0
    assert pr.level_share(track, near) == 1.0
    assert pr.level_share(track, far) == pytest.approx(1 - topk / track.end_s, rel=1e-9)


def test_a_later_track_is_read_as_far_as_both_go() -> None:
    track = pr.emulated_track(ONE)
    half = ramp.Track([s for s in track.steps if s.end_s <= track.end_s / 2])
    assert pr.level_share(track, half) == 1.0
    thr, cover = ramp.throughput(half, 0.0, track.end_s)
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

