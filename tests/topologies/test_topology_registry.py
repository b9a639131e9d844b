"""The topology registry without root: built-in declarations, and a plug-in topology (the
example of topologies/PLUGINS.md, from a temporary folder) refused with one line naming the
field for each way it can be wrong, before anything is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.config.scenario import ScenarioError, validate_scenario
from tests.topologies.mn_custom import MN_LOAD, mn_interpreter
from tests.topologies.plugin import KIND, MODULE, pair_scenario, write_plugin
from topologies import registry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Path:
    path = write_plugin(tmp_path / "plugins")
    monkeypatch.syspath_prepend(str(path.parent))
    yield path
    sys.modules.pop(MODULE, None)


def test_builtins_declare_names_probe_pairs_and_rates():
    star = registry.parse({"kind": "star", "n_workers": 3, "n_cross": 1, "rate_mbit": 40})
    assert star.worker_hosts() == ["w0", "w1", "w2"] and star.cross_hosts() == ["x0"]
    assert star.probe_pairs()["w2"] == ("w0", "w2") and star.nominal_rate_mbit() == 40
    assert star.training_links() == ["w0", "w1", "w2"]  # not the cross host's link
    bell = registry.parse({"kind": "dumbbell", "n_left": 2, "n_right": 1, "n_cross": 2,
                           "bottleneck_mbit": 30, "access_mbit": 500})
    assert bell.link_names() == ["bottleneck", "w0", "w1", "w2", "x0", "x1"]
    pairs = bell.probe_pairs()
    assert pairs["bottleneck"] == ("w0", "w2") and pairs["x1"] == ("w2", "x1")
    assert "w2" in pairs and pairs["w2"][0] != "w0"  # a peer on the right switch
    assert bell.nominal_rate_mbit() == 30
    ls = registry.parse({"kind": "leafspine", "leaves": 2, "spines": 1, "uplink_mbit": 20})
    assert "l1-p0" in ls.link_names() and "l1-p0" not in ls.probe_pairs()
    assert ls.probe_pairs()["w3"] == ("w2", "w3") and ls.nominal_rate_mbit() == 20
    assert registry.kinds() == ["star", "dumbbell", "leafspine", "hosts"]


def test_each_builtin_declares_what_its_topo_builds():
    for kind, data in (("star", {"n_workers": 2, "n_cross": 2, "rate_mbit": 10}),
                       ("dumbbell", {"n_left": 1, "n_right": 2, "bottleneck_mbit": 10}),
                       ("leafspine", {"leaves": 3, "spines": 2})):
        spec = registry.parse({"kind": kind, **data})
        topo = registry.topo_class(kind)(prefix="nstzz00", **spec.build_params())
        assert topo.worker_hosts == spec.worker_hosts(), kind
        assert topo.cross_hosts == spec.cross_hosts(), kind
        assert {n: li.rate_mbit for n, li in topo.named_links.items()} == spec.link_rates()


def test_plugin_topology_validates_and_declares(plugin):
    scn = validate_scenario(pair_scenario(cable_mbit=50), skip_kernel_checks=True)
    assert type(scn.topology).__name__ == "PairParams" and scn.world_size == 2
    assert scn.topology.probe_pairs() == {"cable": ("w0", "w1")}
    assert scn.model_dump()["topology"]["cable_mbit"] == 50.0
    assert registry.rate_of(scn.model_dump()["topology"]) == 50.0


@pytest.mark.parametrize("change,needle", [
    ({"topology.colour": 1}, "topology.colour: unknown field"),
    ({"topology.cable_mbit": -1}, "topology.cable_mbit: Input should be greater than 0 (got -1)"),
    ({"topology.kind": "no_such_module:PairTopo"},
     "topology.kind: cannot import 'no_such_module'"),
    ({"topology.kind": f"{MODULE}:Nope"}, f"topology.kind: module '{MODULE}' has no attribute"),
    ({"topology.kind": f"{MODULE}:PairParams"}, "not a topologies.base.NamedTopo subclass"),
    ({"topology.kind": "ring"}, "'star', 'dumbbell', 'leafspine', 'hosts' or a plug-in"),
    ({"timeline.0.link": "w0"}, "timeline[0] (set_rate): unknown link 'w0'; links: cable"),
])
def test_plugin_topology_bad_input_is_one_line_naming_the_field(plugin, change, needle):
    data = pair_scenario()
    for dotted, value in change.items():
        node = data
        *path, last = dotted.split(".")
        for key in path:
            node = node[int(key)] if key.isdigit() else node[key]
        node[last] = value
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data, skip_kernel_checks=True)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_plugin_whose_build_misses_a_field_is_refused(plugin):
    bad = plugin.parent / "pair_narrow.py"
    bad.write_text(plugin.read_text().replace("def build(self, cable_mbit=100.0,",
                                              "def build(self,"))
    with pytest.raises(ScenarioError, match=r"^topology.kind: its build\(\) does not accept "
                                            r"cable_mbit"):
        validate_scenario({**pair_scenario(), "topology": {"kind": "pair_narrow:PairTopo"}},
                          skip_kernel_checks=True)
    sys.modules.pop("pair_narrow", None)


def test_netsense_refuses_a_broken_plugin_in_one_line(plugin, tmp_path):
    """The installed script: exit 2, one line, no traceback, no results folder."""
    scn = tmp_path / "pair.yaml"
    scn.write_text(yaml.safe_dump({**pair_scenario(), "topology": {"kind": KIND,
                                                                   "cable_mbit": 0}}))
    env = {"PYTHONPATH": str(plugin.parent), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    proc = subprocess.run([str(Path(sys.executable).parent / "netsense"), "run", str(scn),
                           "--results", str(tmp_path / "res")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: scenario pair.yaml: topology.cable_mbit: Input should be greater "
                     "than 0 (got 0)"], proc.stderr
    assert not (tmp_path / "res").exists()


def test_plugin_file_loads_like_mn_custom(plugin):
    """`mn --custom pair_topology.py --topo pair,50` execs the file and reads `topos`."""
    customs: dict = {}
    exec(compile(plugin.read_text(), str(plugin), "exec"), customs, customs)
    topo = customs["topos"]["pair"](50)
    assert topo.worker_hosts == ["w0", "w1"] and topo.named_links["cable"].rate_mbit == 50


def test_plots_and_tables_take_rates_from_the_topology_declaration(plugin):
    import pandas as pd

    from testbed.analysis import plots, tables

    def events(*rows):
        return pd.DataFrame([dict(t_scheduled=t, t_applied=t, kind=k, target=g, value=v)
                             for t, k, g, v in rows])

    star = {"scenario": {"topology": {"kind": "star", "n_workers": 2, "n_cross": 1,
                                      "rate_mbit": 100}}}
    rate, streams = plots.network_series(star, events(
        (1, "set_rate", "w0", 10), (2, "set_rate", "x0", 5), (3, "cross_start", "g", 3)), 9)
    assert rate.values.tolist() == [[0, 100], [1, 10], [2, 10], [9, 10]]  # x0 is no training link
    assert streams["streams"].max() == 3
    bell = {"scenario": {"topology": {"kind": "dumbbell", "n_left": 1, "n_right": 1,
                                      "bottleneck_mbit": 200, "access_mbit": 50}}}
    rate, _ = plots.network_series(bell, events((1, "set_rate", "bottleneck", 20)), 5)
    assert rate["rate_mbit"].tolist() == [50, 20, 20]  # access links bound it at first
    pair = {"scenario": {"topology": {"kind": KIND, "cable_mbit": 40}}}
    assert tables._rate_of({}, pair) == 40.0
    rate, _ = plots.network_series(pair, events((1, "set_rate", "cable", 4)), 5)
    assert rate["rate_mbit"].tolist() == [40, 4, 4]


def test_plugin_file_loads_under_the_mn_interpreter(plugin):
    """`sudo env PYTHONPATH=<repo>:<plugins> mn --custom pair_topology.py --topo pair,50`,
    as PLUGINS.md says, under mn's own Python."""
    proc = subprocess.run([mn_interpreter(), "-c", MN_LOAD, str(plugin), "pair", "50"],
                          cwd=plugin.parent, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                               "PYTHONPATH": f"{REPO}:{plugin.parent}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["w0", "w1", "cable"]
