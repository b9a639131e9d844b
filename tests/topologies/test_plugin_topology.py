"""A user's topology from a file outside the package, named by import path, run for real.

The module is the worked example of topologies/PLUGINS.md, taken from that file (so the
documentation is what is tested), written into a temporary folder on ``sys.path``; no file
of the package changes. The run builds real namespaces and a shaped veth, probes the link
with iperf3, changes its rate from the timeline and trains two DDP workers over it.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from testbed.analysis import tables
from testbed.config.scenario import validate_scenario
from testbed.emulation import leftovers
from testbed.orchestration.run import run_scenario
from tests.topologies.plugin import KIND, pair_scenario, write_plugin

pytestmark = pytest.mark.emulation


@pytest.mark.slow  # two workers importing torch, probing and training
def test_plugin_topology_runs_an_emulated_training(tmp_path, monkeypatch):
    write_plugin(tmp_path / "plugins")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    scn = validate_scenario(pair_scenario(cable_mbit=50))
    assert scn.world_size == 2 and scn.topology.link_names() == ["cable"]

    out = run_scenario(scn, "allreduce", 0, tmp_path / "runs" / "pair", progress=False)
    assert out.status == "ok", out.summary.get("reason")
    run = out.run_dir
    assert out.summary["steps"] == 30 and out.summary["world_size"] == 2

    cable = next(r for r in pd.read_csv(run / "link.csv").to_dict("records")
                 if r["link"] == "cable")
    assert (cable["src"], cable["dst"]) == ("w0", "w1")
    assert 0.6 * 50 < float(cable["measured_mbit"]) < 1.05 * 50, cable

    events = pd.read_csv(run / "events.csv")
    applied = events[(events["kind"] == "set_rate") & (events["target"] == "cable")]
    assert len(applied) == 1 and float(applied["value"].iloc[0]) == 20.0

    config = json.loads((run / "config.json").read_text())
    assert config["scenario"]["topology"] == {
        "kind": KIND, "cable_mbit": 50.0, "queue_pkts": 100, "delay_ms": 0.0,
        "jitter_ms": 0.0, "loss_pct": 0.0, "congestion_control": None,
        "ack_first": False}
    assert config["tcp_congestion_control"]  # what the hosts used: the testbed's default
    runs, _ = tables.load_runs(tmp_path / "runs")
    assert runs["rate_mbit"].tolist() == [50.0]  # from the plug-in's link_rates()

    prefix = out.summary["prefix"]
    assert prefix and leftovers.interfaces_with_prefix(prefix) == []
    assert leftovers.find(prefix=prefix)["interfaces"] == []
