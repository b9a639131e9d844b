"""A tiny paper-scale run end to end (issue 41): each paper scenario's code path -- the
model factory, its data, recorded or real gradients, the emulated accelerator, dilation,
the star and the dumbbell -- at two workers, three steps, reduced model sizes.

Real emulated runs (root, namespaces, tc): marked ``emulation`` like the other end-to-end
tests; on a shared machine run them under ``flock /tmp/netsense-heavy.lock``.
"""

from __future__ import annotations

import json

import pytest

from testbed.config.scenario import apply_overrides, load_scenario
from testbed.orchestration.run import run_scenario

pytestmark = [pytest.mark.emulation, pytest.mark.slow]  # slow: three paper-scale runs

SMALL = {
    "resnet18": {"workload.args": {"model-args": "width=4"}},
    "vgg16": {"workload.args": {"model-args": "width=4,hidden=32"}},
    "gpt2": {"workload.args": {"context": 16,
                               "model-args": "layers=1,d_model=32,heads=2,positions=16"}},
}
TOPOLOGY = {"star": {"topology.n_workers": 2},
            "dumbbell": {"topology.n_left": 1, "topology.n_right": 1}}


@pytest.mark.parametrize(("model", "topo", "method"), [
    ("resnet18", "star", "topk:0.01"), ("vgg16", "dumbbell", "allreduce"),
    ("gpt2", "star", "netsenseml"),
])
def test_tiny_paper_scale_run(tmp_path, model, topo, method):
    scn = load_scenario(f"paper-{model}-{topo}")
    scn = apply_overrides(scn, {**TOPOLOGY[topo], **SMALL[model], "workload.steps": 3,
                                "workload.batch_size": 2,
                                "accelerator": {"step_ms": 20, "dilation": 2}})
    out = run_scenario(scn, method, 0, tmp_path / "run", progress=False)
    assert out.status == "ok", out.summary
    assert out.summary["steps"] == 3 and out.summary["bytes_sent_total"] > 0
    config = json.loads((out.run_dir / "config.json").read_text())
    assert config["scenario"]["workload"]["grads"] == "recorded"
    assert config["worker_argv"][config["worker_argv"].index("--grads") + 1] == "recorded"
    start = json.loads((out.run_dir / "workers" / "rank0.jsonl").read_text().splitlines()[0])
    assert start["grads"] == "recorded" and start["dilation"] == 2


def test_tiny_time_to_accuracy_run_computes_for_real(tmp_path):
    scn = apply_overrides(load_scenario("paper-resnet18-tta"), {
        "topology.n_workers": 2, "workload.args": {"model-args": "width=4"},
        "workload.time_limit_s": None, "workload.steps": 4, "workload.eval_every": 2,
        "workload.batch_size": 4, "accelerator": {"step_ms": 20, "dilation": 2}})
    out = run_scenario(scn, "allreduce", 0, tmp_path / "run", progress=False)
    assert out.status == "ok", out.summary
    assert out.summary["final_accuracy"] is not None
    start = json.loads((out.run_dir / "workers" / "rank0.jsonl").read_text().splitlines()[0])
    assert start["grads"] == "real"
