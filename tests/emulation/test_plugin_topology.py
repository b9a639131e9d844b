"""A user's topology from a file outside the package, named by import path, run for real.

The module is the worked example of topologies/PLUGINS.md, taken from that file (so the
documentation is what is tested), written into a temporary folder on ``sys.path``; no file
of the package changes. The run builds real namespaces and a shaped veth, probes the link
with iperf3, changes its rate from the timeline and trains two DDP workers over it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from testbed.analysis import tables
from testbed.config.scenario import validate_scenario
from testbed.emulation import leftovers
from testbed.orchestration.run import run_scenario

pytestmark = pytest.mark.emulation

REPO = Path(__file__).resolve().parents[2]
MODULE = "pair_topology"
KIND = f"{MODULE}:PairTopo"


def write_plugin(folder: Path) -> Path:
    """The ``pair_topology.py`` block of topologies/PLUGINS.md, as a file in ``folder``."""
    text = (REPO / "topologies" / "PLUGINS.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    code = next(b for b in blocks if b.startswith(f"# {MODULE}.py"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{MODULE}.py"
    path.write_text(code)
    return path


def pair_scenario(**topology) -> dict:
    return {
        "name": "pair", "topology": {"kind": KIND, **topology},
        # width 256 (340 kB of gradient a step): the run checks the plug-in's links, not
        # speed, and the default width's steps at 20 Mbit/s made this test a minute long
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32, "steps": 30,
                     "args": {"width": 256}},
        "methods": ["allreduce"], "probe_links": True, "probe_s": 1.0,
        "timeline": [{"at_s": 0, "kind": "set_rate", "link": "cable", "rate_mbit": 20}],
    }


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
        "jitter_ms": 0.0, "loss_pct": 0.0}
    runs, _ = tables.load_runs(tmp_path / "runs")
    assert runs["rate_mbit"].tolist() == [50.0]  # from the plug-in's link_rates()

    prefix = out.summary["prefix"]
    assert prefix and leftovers.interfaces_with_prefix(prefix) == []
    assert leftovers.find(prefix=prefix)["interfaces"] == []
