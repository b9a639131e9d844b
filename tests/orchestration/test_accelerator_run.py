"""Runs under the emulated accelerator in a real emulated network (root, namespaces, tc).

A dilated run keeps its records in virtual time (steps.csv's launch clock and the worker's
clock agree, and are k times shorter than the wall clock), its links at the virtual rate
divided by k, the pacing's statistics per step, and the host's load; a run whose host
cannot keep up with the profile is marked degraded and warned about, never reported as
if the profile had held.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from testbed.config.scenario import apply_overrides, load_scenario
from testbed.orchestration.run import run_scenario

pytestmark = pytest.mark.emulation


def _scenario(**accel):
    scn = load_scenario("accel-static")
    return apply_overrides(scn, {
        "accelerator": accel, "workload.time_limit_s": None, "workload.steps": 40,
        "workload.args.stop-at-target": False, "topology.bottleneck_mbit": 1000,
        "topology.access_mbit": 10000})


def _rows(run: Path, rank: int = 0) -> list[dict[str, str]]:
    with open(run / "steps.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["rank"] == str(rank) and r["step_s"]]


def test_a_dilated_run_records_virtual_time_and_its_pacing(tmp_path: Path) -> None:
    # 30 ms a step on the emulated device (the host needs ~10-20), k = 3
    # (lateness up to 20 % of the training time is let through: other tests may load the host)
    out = run_scenario(_scenario(step_ms=30, dilation=3, max_overrun=0.2), "fp16", 0,
                       tmp_path / "r", progress=False)
    assert out.status == "ok", out.summary.get("reason")
    s, cfg = out.summary, json.loads((out.run_dir / "config.json").read_text())
    assert cfg["accelerator"]["dilation"] == 3 and cfg["accelerator"]["mode"] == "paced"
    assert "--dilation" in cfg["worker_argv"] and "--step-ms" in cfg["worker_argv"]
    rows = _rows(out.run_dir)
    steps = [float(r["step_s"]) for r in rows[1:]]
    assert min(steps) >= 0.03  # never faster than the profile (virtual seconds)
    # the launch clock (wall / k) and the worker's own clock advance alike
    span_t = float(rows[-1]["t"]) - float(rows[1]["t"])
    span_worker = float(rows[-1]["t_worker"]) - float(rows[1]["t_worker"])
    span_wall = float(rows[-1]["wall"]) - float(rows[1]["wall"])
    assert span_t == pytest.approx(span_worker, rel=0.05)
    assert span_wall == pytest.approx(3 * span_t, rel=0.05)
    assert {"pace_wait_s", "pace_late_s", "pace_overrun"} <= set(rows[0])
    assert s["overruns"]["of"] == 2 * 37 and s["overruns"]["late_share"] <= 0.2
    assert "degraded" not in s
    # the fp16 payload of a 2.2 MB gradient over 1 Gbit/s virtual takes ~9 ms virtual
    comm = sorted(float(r["comm_s"]) for r in rows[1:])
    assert 0.006 < comm[len(comm) // 2] < 0.03
    with open(out.run_dir / "bottleneck.csv", newline="") as fh:
        configured = {float(r["configured_mbit"]) for r in csv.DictReader(fh)
                      if r["link"] == "bottleneck"}
    assert configured == {1000.0}  # virtual; the link itself ran at 333 Mbit/s
    assert (out.run_dir / "host.csv").is_file() and s["host_load"]["samples"] > 0


def test_a_host_that_cannot_keep_up_is_marked_degraded(tmp_path: Path) -> None:
    # 0.2 ms a step undilated: no CPU computes this model's step that fast
    out = run_scenario(_scenario(step_ms=0.2, dilation=1), "fp16", 0, tmp_path / "r",
                       progress=False)
    s = out.summary
    assert out.status == "ok", s.get("reason")
    assert s["overruns"]["share"] > 0.5 and s["overruns"]["late_share"] > 0.5
    assert "did not keep up" in s["degraded"] and "to the training time" in s["degraded"]
    assert any("did not keep up" in w for w in s["warnings"])
