"""The inputs explain themselves: every schema field has a description (in the generated
schema and in the committed copies), ``netsense list`` shows each topology's hosts and links,
``netsense show`` prints them for a scenario, defaults are what the shipped scenarios need,
and a field the chosen topology does not take is named as such."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.config import schemas
from testbed.config.scenario import SCENARIO_DIR, Scenario, ScenarioError, validate_scenario

NETSENSE = Path(sys.executable).with_name("netsense")
REPO = Path(__file__).resolve().parents[2]


def _undescribed(node: Any, path: str = "") -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if not str(prop.get("description", "")).strip():
                out.append(f"{path}.{name}")
        for key, value in node.items():
            out += _undescribed(value, f"{path}/{key}" if key != "properties" else path)
    elif isinstance(node, list):
        for value in node:
            out += _undescribed(value, path)
    return out


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_every_schema_field_has_a_description(kind: str) -> None:
    fresh = schemas.schema(kind)
    assert not _undescribed(fresh), _undescribed(fresh)
    committed = json.loads(schemas.path(kind).read_text())
    assert committed == json.loads(schemas.text(kind)), "run `make schemas`"
    assert not _undescribed(committed)
    n = json.dumps(fresh).count('"description"')
    assert n >= (60 if kind == "scenario" else 15), n


def test_rates_and_seconds_say_their_unit() -> None:
    text = json.dumps(schemas.schema("scenario"))
    props = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                props.setdefault(name, prop.get("description", ""))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(json.loads(text))
    for name, desc in props.items():
        if name.endswith("_mbit"):
            assert "Mbit/s" in desc, (name, desc)
        if name.endswith("_s") or name.endswith("_ms"):
            assert "second" in desc.lower() or "ms" in desc, (name, desc)


def _sh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(REPO))
    exe = [str(NETSENSE)] if NETSENSE.is_file() else [sys.executable, "-m", "testbed.cli"]
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_list_shows_each_topology_with_its_hosts_and_links(tmp_path: Path) -> None:
    out = _sh("list", cwd=tmp_path).stdout
    block = out[out.index("topologies ("):]
    assert "TopologyParams" not in block
    for kind in ("star", "dumbbell", "leafspine", "hosts"):
        assert f"\n  {kind} " in block, kind
    assert "bottleneck_mbit*" in block and "rate_mbit*" in block  # required fields marked
    assert "worker hosts: w0 w1" in block
    # each kind's links as built for a shipped scenario (the first of that kind by name)
    dumbbell = block[block.index("\n  dumbbell "):block.index("\n  leafspine ")]
    example = re.search(r"e\.g\. ([\w.-]+):", dumbbell)
    assert example and (SCENARIO_DIR / f"{example.group(1)}.yaml").is_file()
    assert re.search(r"links: bottleneck [\d.]+ Mbit/s", dumbbell)
    assert "l0-p0" in block  # a leaf-spine uplink


def test_show_prints_the_hosts_and_links_it_will_build(tmp_path: Path) -> None:
    proc = _sh("show", "smoke", "--set", "topology.rate_mbit=42", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head = [ln for ln in proc.stdout.splitlines() if ln.startswith("#")]
    assert "#   worker hosts: w0 w1" in head
    assert any(ln.startswith("#   links: w0 42 Mbit/s, w1 42 Mbit/s") for ln in head), head
    yaml.safe_load(proc.stdout)  # still valid YAML


def test_timeline_origin_default_is_what_shipped_scenarios_use() -> None:
    assert Scenario.model_fields["timeline_origin"].default == "first_step"
    for path in SCENARIO_DIR.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        if data.get("timeline"):
            assert data.get("timeline_origin", "first_step") == "first_step", path.name


BASE = {"name": "x", "workload": {"model": "mlp", "dataset": "digits", "time_limit_s": 3},
        "methods": ["allreduce"]}


def test_a_field_of_another_topology_is_named_as_such() -> None:
    with pytest.raises(ScenarioError) as e:
        validate_scenario({**BASE, "topology": {"kind": "dumbbell", "n_left": 1, "n_right": 1,
                                                "rate_mbit": 50}}, skip_kernel_checks=True)
    msg = str(e.value)
    assert msg.startswith("topology.rate_mbit: not a field of a dumbbell topology"), msg
    assert "bottleneck_mbit" in msg and "star" in msg and "\n" not in msg
    with pytest.raises(ScenarioError) as e:  # a typo still gets its did-you-mean
        validate_scenario({**BASE, "topology": {"kind": "star", "n_workers": 2,
                                                "rate_mbt": 50}}, skip_kernel_checks=True)
    assert "topology.rate_mbt" in str(e.value) and "did you mean 'rate_mbit'" in str(e.value)


def test_the_readme_scenario_example_is_valid() -> None:
    import re

    text = (REPO / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block, "README lost its scenario example"
    scn = validate_scenario(yaml.safe_load(block.group(1)), skip_kernel_checks=True)
    assert scn.timeline and scn.timeline_origin == "first_step"
