"""Field names: old names still load (with one note each), did-you-mean, committed schemas."""

from __future__ import annotations

import json

import pytest
import yaml

from testbed.config import renames, schemas
from testbed.config import scenario as scn
from testbed.config import sweep as sw

OLD = {
    "name": "old-names", "probe_seconds": 3,
    "topology": {"kind": "star", "n_workers": 2, "n_cross": 0, "rate_mbit": 100},
    "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32, "time_limit_s": 4},
    "methods": ["allreduce"],
    "timeline": [{"at": 2, "kind": "set_rate", "link": "w1", "mbit": 30}],
}


def test_old_names_load_as_new_ones_with_one_note_each(capsys, monkeypatch):
    monkeypatch.setattr(renames, "_said", set())
    s = scn.validate_scenario(OLD, label="scenario old.yaml")
    assert s.probe_s == 3
    assert (s.timeline[0].at_s, s.timeline[0].rate_mbit) == (2, 30)
    scn.validate_scenario(OLD, label="scenario old.yaml")  # a sweep loads a file many times
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 3, notes
    assert any("'at' is deprecated; it is read as 'at_s'" in n for n in notes)
    assert any("'mbit' is deprecated; it is read as 'rate_mbit'" in n for n in notes)
    assert all(n.startswith("note: scenario old.yaml: ") for n in notes)


def test_old_override_paths_are_renamed(monkeypatch):
    monkeypatch.setattr(renames, "_said", set())
    s = scn.validate_scenario(OLD)
    t = scn.apply_overrides(s, {"timeline.0.at": 1.5, "timeline.0.mbit": 7, "probe_seconds": 1})
    assert (t.timeline[0].at_s, t.timeline[0].rate_mbit, t.probe_s) == (1.5, 7, 1)


def test_old_and_new_name_together_is_refused():
    data = yaml.safe_load(yaml.safe_dump(OLD))
    data["timeline"][0]["at_s"] = 3
    with pytest.raises(scn.ScenarioError, match=r"timeline\[0\]\.at: unknown field"):
        scn.validate_scenario(data)


@pytest.mark.parametrize("path, typo, expected", [
    (("topology",), "rate_mbt", "topology.rate_mbt: unknown field; did you mean 'rate_mbit'?"),
    (("workload",), "batchsize", "workload.batchsize: unknown field; did you mean 'batch_size'?"),
    ((), "seed", "seed: unknown field; did you mean 'seeds'?"),
])
def test_unknown_scenario_field_suggests_the_closest(path, typo, expected):
    data = yaml.safe_load(yaml.safe_dump(OLD))
    node = data
    for p in path:
        node = node[p]
    node[typo] = 1
    with pytest.raises(scn.ScenarioError) as err:
        scn.validate_scenario(data)
    assert str(err.value) == expected


def test_unknown_event_field_suggests_from_that_event_kind():
    data = yaml.safe_load(yaml.safe_dump(OLD))
    data["timeline"][0]["lnk"] = "w1"
    with pytest.raises(scn.ScenarioError, match=r"timeline\[0\]\.lnk: unknown field; did you "
                       r"mean 'link'\?"):
        scn.validate_scenario(data)


def test_unknown_sweep_field_suggests_the_closest(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "methods": ["allreduce"], "experiments": [
        {"name": "e", "scenario": "smoke", "gird": {"topology.rate_mbit": [1]}}]}))
    with pytest.raises(sw.SweepError, match=r"experiments\[0\]\.gird: unknown field; did you mean "
                       r"'grid'\?"):
        sw.load_sweep(f)


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_committed_schema_is_current(kind):
    committed = schemas.path(kind).read_text()
    assert committed == schemas.text(kind), (
        f"testbed/schemas/{kind}.schema.json is stale: run `make schemas`")
    doc = json.loads(committed)
    assert doc["additionalProperties"] is False
    if kind == "scenario":
        assert "at_s" in json.dumps(doc) and '"at"' not in json.dumps(doc)
