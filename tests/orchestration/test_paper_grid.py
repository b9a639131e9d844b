"""The paper's grid in payload mode (issue 48): the ``paper-grid`` sweep plans what its
header says, and a tiny payload run goes end to end through the emulation.

The sweep test reads only the files; the run test builds a real emulated network (root,
namespaces, tc; marked ``emulation``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netsenseml.policy import PolicyConfig
from testbed.config.scenario import apply_overrides, load_scenario
from testbed.config.sweep import expand, load_sweep, resolve_scenarios
from testbed.orchestration.run import run_scenario

ADAPTIVE = {"netsenseml", "netsenseml-paper"}


def test_paper_grid_plans_every_model_on_8_workers_in_payload_mode(tmp_path: Path) -> None:
    runs = resolve_scenarios(expand(load_sweep("paper-grid"), tmp_path))
    models = set()
    for r in runs:
        scn = r.scenario
        assert scn.workload.grads == "payload", r.run_dir
        assert scn.world_size == 8, r.run_dir
        models.add(scn.workload.model)
        if r.method in ADAPTIVE and scn.workload.steps is not None:
            # NetSenseML's probes (every probe_every steps) and their decisions in the window
            assert scn.workload.steps >= 2 * PolicyConfig().probe_every, r.run_dir
    assert models == {"resnet18-imagenet", "vgg16", "gpt2-small"}
    throughput = [r for r in runs if r.scenario.workload.steps is not None]
    rates = {(r.scenario.topology.kind, getattr(r.scenario.topology, "rate_mbit", None)
              or r.scenario.topology.bottleneck_mbit) for r in throughput}
    assert rates == {(k, v) for k in ("star", "dumbbell") for v in (200, 300, 1000, 10000)}


@pytest.mark.emulation
def test_tiny_payload_run_sends_and_is_paced_without_a_host_timing(tmp_path: Path) -> None:
    # 1+1: the ring still crosses the bottleneck each way; what is checked (payload mode's
    # bytes a step, no host timing) is per rank, so two ranks are enough. Two steps: the
    # first is the one a dense start would change (PowerSGD's real start sends 2 dense),
    # the second the low-rank steady state it must equal (each dilated step is ~3.5 s here)
    scn = apply_overrides(load_scenario("paper-gpt2-dumbbell"), {
        "topology.n_left": 1, "topology.n_right": 1, "workload.grads": "payload",
        "workload.steps": 2, "accelerator": {"profile": "a100-estimated", "dilation": "auto"}})
    out = run_scenario(scn, "powersgd:4", 0, tmp_path / "run", progress=False)
    assert out.status == "ok", out.summary
    config = json.loads((out.run_dir / "config.json").read_text())
    acc = config["accelerator"]
    assert acc["host_timing_s"] == 0 and acc["host_rule"] == "payload"
    assert config["worker_argv"][config["worker_argv"].index("--grads") + 1] == "payload"
    start = json.loads((out.run_dir / "workers" / "rank0.jsonl").read_text().splitlines()[0])
    assert start["grads"] == "payload" and start["params"] == 124_439_808  # GPT-2 small, whole
    steps = [json.loads(line) for line in (out.run_dir / "workers" / "rank0.jsonl")
             .read_text().splitlines() if '"step"' in line and '"kind": "step"' in line]
    # payload mode's PowerSGD is low-rank from the first step (methods.PAYLOAD_DENSE_STEPS)
    sent = {s["bytes_sent"] for s in steps}
    assert len(steps) == 2 and len(sent) == 1 and 0 < sent.pop() < 4 * 124_439_808 / 20
