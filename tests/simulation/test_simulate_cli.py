"""``netsense simulate``: bad input is one line naming the option and its allowed values
(exit 2, no traceback, nothing simulated), a machine without SimGrid is told to run
``make setup``, and a fit refuses files that are not one."""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.cli.app import main
from testbed.simulation import engine
from testbed.simulation.calibrate import (
    Calibration,
    RunFacts,
    fit_compute,
    load_calibration,
    seed_groups,
    spread_pct,
)
from testbed.simulation.platform import Fabric
from testbed.simulation.sim import NetCalibration


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 2, (argv, out.err)
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith("error: ") and "Traceback" not in out.err + out.out
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["--fabric", "torus"], "--fabric: 'torus' is not one of fattree, dragonfly, scenario"),
    (["--workers", "8,x"], "--workers: 'x' is not a worker count in 2..4096"),
    (["--workers", "1"], "--workers: '1' is not a worker count"),
    (["--steps", "2"], "--steps"),
    (["--figure", "a.png"], "--figure: needs --out"),
])
def test_predict_refuses_bad_options(capsys: pytest.CaptureFixture[str], args: list[str],
                                     needle: str) -> None:
    line = _one_line(capsys, ["simulate", "predict", "sim-star", *args])
    assert needle in line, line


@pytest.mark.skipif(not engine.available(), reason="simgrid not importable")
def test_predict_refuses_bad_method_scenario_and_calibration(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _one_line(capsys, ["simulate", "predict", "sim-star", "-m", "allreduce,powersgd:2"])
    assert "--methods: method 'powersgd:2'" in line and "topk:R" in line, line
    line = _one_line(capsys, ["simulate", "predict", "no-such-scenario", "-c", "x.json"])
    assert "unknown scenario 'no-such-scenario'" in line, line
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"format": "other"}))
    line = _one_line(capsys, ["simulate", "predict", "sim-star", "-c", str(bad)])
    assert "--calibration: calibration: format 'other'" in line, line
    line = _one_line(capsys, ["simulate", "predict", "sim-star", "-c", str(tmp_path)])
    assert "--calibration: no ok run folders" in line, line
    line = _one_line(capsys, ["simulate", "validate", "-c", str(bad)])
    assert "--runs:" in line, line


def test_without_simgrid_the_error_names_make_setup(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "simgrid", None)  # `import simgrid` raises ImportError
    monkeypatch.setattr(engine, "DEBIAN_DIR", str(tmp_path))
    line = _one_line(capsys, ["simulate", "predict", "sim-star", "-c", "x.json"])
    assert "simgrid" in line and "make setup" in line, line


def test_a_fit_round_trips_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    cal = Calibration(NetCalibration(2.0, 0.9, 1e-3, 0.5), {"idle": {"none": 0.01}},
                      {"idle": {"none": 0.0}}, ["r"], 3.0,
                      {"model": "mlp", "dataset": "digits", "batch_size": 16,
                       "dense_bytes": 1e5, "topk_bytes_per_element": 8.0},
                      {"idle": {"none": 0.5}})
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(cal.as_dict()))
    assert load_calibration(p) == cal
    p.write_text("[1]")
    with pytest.raises(ValueError, match="not a JSON object"):
        load_calibration(p)
    p.write_text(json.dumps({**cal.as_dict(), "net": {"bogus": 1}}))
    with pytest.raises(ValueError, match="missing or bad field"):
        load_calibration(p)


def _facts(method: str, n: int, compute_s: float) -> RunFacts:
    return RunFacts(path=f"{method}-{n}", method=method, n=n,
                    fabric=Fabric("star", n, 20.0), cross=(), cpus=2, batch_size=16,
                    time_limit_s=6.0, steps_limit=None, dense_bytes=1e5,
                    topk_bytes_per_element=8.0, steps=10, compute_s=compute_s, codec_s=0.0,
                    comm_s=0.1, step_s=0.1 + compute_s, bytes_sent=1e5, throughput=1.0)


def test_compute_contention_is_fitted_not_assumed() -> None:
    # c = 10 ms uncontended, k = 0.4: 3 workers on 2 cores -> x1.2, 6 -> x1.8
    compute, _, share = fit_compute([_facts("allreduce", 3, 0.012),
                                     _facts("allreduce", 6, 0.018),
                                     _facts("fp16", 6, 0.009)])
    assert share["idle"]["none"] == pytest.approx(0.4)
    assert compute["idle"]["none"] == pytest.approx(0.010)
    assert share["idle"]["fp16"] == pytest.approx(0.4)  # one worker count: the others' k
    assert compute["idle"]["fp16"] == pytest.approx(0.005)


def test_the_last_ranks_compute_is_fitted_apart_from_the_mean_ranks() -> None:
    # 3 and 6 workers on 2 cores: the mean rank computes 12 / 18 ms (c = 10 ms, k = 0.4),
    # the step's last rank 15 / 24 ms (c = 12 ms, k = 0.5)
    runs = [replace(_facts("allreduce", 3, 0.012), compute_max_s=0.015),
            replace(_facts("allreduce", 6, 0.018), compute_max_s=0.024),
            _facts("fp16", 6, 0.009)]  # not measured: its mean rank stands in
    mean, _, _ = fit_compute(runs)
    crit, _, share = fit_compute(runs, critical=True)
    assert mean["idle"]["none"] == pytest.approx(0.010)
    assert crit["idle"]["none"] == pytest.approx(0.012)
    assert share["idle"]["none"] == pytest.approx(0.5)
    assert crit["idle"]["fp16"] == pytest.approx(0.009 / (1 + 0.5 * 2))


@pytest.mark.skipif(not engine.available(), reason="simgrid not importable")
def test_predict_writes_the_table_and_the_figure(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    comp = {"none": 0.003, "fp16": 0.003, "int8": 0.006, "topk:0.01": 0.004,
            "topk:0.1": 0.004}
    cal = Calibration(NetCalibration(5.0, 1.0, 5e-4, 1.0), {"idle": comp},
                      {"idle": dict.fromkeys(comp, 0.0)}, [], None,
                      {"model": "mlp", "dataset": "digits", "batch_size": 16,
                       "dense_bytes": 340008.0, "topk_bytes_per_element": 8.0},
                      {"idle": dict.fromkeys(comp, 0.0)})
    (tmp_path / "cal.json").write_text(json.dumps(cal.as_dict()))
    out, png = tmp_path / "p.csv", tmp_path / "p.png"
    rc = main(["simulate", "predict", "sim-star", "-c", str(tmp_path / "cal.json"),
               "--workers", "8,32", "-m", "allreduce,topk:0.01,netsenseml", "--steps", "6",
               "-o", str(out), "--figure", str(png)])
    assert rc == 0, capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [(r["method"], r["workers"]) for r in rows] == [
        ("allreduce", "8"), ("allreduce", "32"), ("topk:0.01", "8"), ("topk:0.01", "32"),
        ("netsenseml", "8"), ("netsenseml", "32")]
    by = {(r["method"], int(r["workers"])): r for r in rows}
    # the all-gather's step grows with W much faster than the allreduce's
    tk = float(by["topk:0.01", 32]["step_s"]) / float(by["topk:0.01", 8]["step_s"])
    ar = float(by["allreduce", 32]["step_s"]) / float(by["allreduce", 8]["step_s"])
    assert tk > ar
    assert all(float(r["tta_s"]) > 0 and r["level"] for r in rows)
    assert png.stat().st_size > 10_000


def test_seeds_of_one_point_are_one_ground_truth() -> None:
    # three seeds of one point and one run of another W: two points, the seeds together
    runs = [_facts("allreduce", 4, c) for c in (0.01, 0.02, 0.03)] + [_facts("allreduce", 8, 0.01)]
    groups = seed_groups(runs)
    assert [len(g) for g in groups] == [3, 1]
    assert spread_pct([q.step_s for q in groups[0]]) == pytest.approx(100 * 0.02 / 0.12)
    assert spread_pct([1.0]) == 0.0


def test_a_runs_backlog_is_the_filled_directions_median_after_the_streams_start(
        tmp_path: Path) -> None:
    from testbed.simulation.calibrate import _queue_fill

    head = "t,link,dev,toward,configured_mbit,delivered_mbit,backlog_bytes\n"
    rows = [f"{t},w1,s0-eth2,w1,20,20,{b}\n" for t, b in
            ((0.1, 900_000), (1.0, 100_000), (1.1, 300_000), (1.2, 200_000))]
    rows += [f"{t},w1,w1-eth0,s0,20,5,0\n" for t in (0.1, 1.0, 1.1, 1.2)]
    (tmp_path / "bottleneck.csv").write_text(head + "".join(rows))
    # before 1.0 s (the streams' start) left out; the median of 100/300/200 kB
    assert _queue_fill(tmp_path, 1.0, 100) == pytest.approx(200_000 / (100 * 1514), abs=1e-4)
    assert _queue_fill(tmp_path / "missing", 1.0, 100) == 0.0


@pytest.mark.skipif(not engine.available(), reason="simgrid not importable")
def test_validate_replays_each_congested_seed_with_its_own_backlog() -> None:
    from testbed.simulation.calibrate import validate
    from testbed.simulation.sim import CrossFlow

    comp = {"none": 0.003, "topk:0.01": 0.004}
    cal = Calibration(NetCalibration(1.0, 1.0, 0.0, 1.0, queue_fraction=1.0,
                                     queue_fill=2.0, queue_overlap=1.0),
                      {"congested": comp}, {"congested": dict.fromkeys(comp, 0.0)}, [], None,
                      {}, {"congested": dict.fromkeys(comp, 0.0)})

    def run(seed: int, fill: float) -> RunFacts:
        return replace(_facts("topk:0.01", 2, 0.004), path=f"topk-s{seed}", steps_limit=6,
                       time_limit_s=None, cross=(CrossFlow("x0", "w1", 4, 0.0),),
                       fabric=Fabric("star", 2, 20.0, cross=1), queue_fill=fill)

    # a 6.8 kB message waits out the standing queue: 1 or 3 full queues of 100 frames
    one, three = (validate([run(0, f)], cal, workers=1, measured_queue=True)[0]
                  for f in (1.0, 3.0))
    both = validate([run(0, 1.0), run(1, 3.0)], cal, workers=2, measured_queue=True)[0]
    median = validate([run(0, 1.0), run(1, 3.0)], cal, workers=2)[0]
    wait = 100 * 1514 / 2.5e6
    assert three["step_pred_s"] - one["step_pred_s"] == pytest.approx(2 * wait, rel=0.05)
    assert both["step_pred_s"] == pytest.approx(
        (one["step_pred_s"] + three["step_pred_s"]) / 2, rel=0.01)
    # without measured_queue every seed gets the fit's fill (2 full queues)
    assert median["step_pred_s"] == pytest.approx(one["step_pred_s"] + wait, rel=0.05)
