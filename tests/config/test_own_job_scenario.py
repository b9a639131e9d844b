"""Validation of an own job's scenario and the checks a user can trust (issue 42, items 1,
5 and 6): a command's script found relative to the scenario file and the built-in worker's
fields refused beside it; cross traffic that shares no link with training warned of; a
method plug-in's import path checked as model plug-ins are; a timeline denser than the host
applies refused with the rate it can apply. Real files and the real ``netsense`` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.config.scenario import (
    MAX_RATE_CHANGES_PER_S,
    ScenarioError,
    load_scenario,
    validate_scenario,
)

REPO = Path(__file__).resolve().parents[2]
NETSENSE = Path(sys.executable).parent / "netsense"
STAR = {"kind": "star", "n_workers": 2, "n_cross": 2, "rate_mbit": 50}


def _scenario(tmp_path: Path, workload: dict, **more) -> Path:
    (tmp_path / "job.py").write_text("print('hi')\n")
    (tmp_path / "job.sh").write_text("echo hi\n")  # not executable
    data = {"name": "own", "topology": STAR, "workload": workload, "methods": ["fp16"],
            "timeout_s": 60, **more}
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_command_is_found_relative_to_the_scenario_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir("/")
    scn = load_scenario(_scenario(tmp_path, {"command": ["python", "job.py", "--epochs", "2"]}))
    assert scn.workload.own_job
    assert scn.workload.command == ["python", str(tmp_path / "job.py"), "--epochs", "2"]
    assert scn.workload.cwd == str(tmp_path)
    assert scn.deadline_s() == 60


@pytest.mark.parametrize(("workload", "says"), [
    ({"command": ["python", "nope.py"]}, "script 'nope.py' not found"),
    ({"command": ["python", "job.py"], "model": "resnet18"}, "model: a field of the built-in"),
    ({"command": ["python", "job.py"], "steps": 10}, "steps: a field of the built-in"),
    ({"command": ["python", "job.py"], "args": {"width": 8}}, "args: a field of the built-in"),
    ({"command": ["python", "job.py"], "env": {"RANK": "1"}}, "env.RANK: set by the testbed"),
    ({"command": ["./job.sh"]}, "is not executable"),
    ({"command": ["nst-no-such-program"]}, "not found on PATH"),
    ({"model": "mlp", "steps": 3, "cwd": "."}, "cwd: only for an own job"),
])
def test_an_own_jobs_bad_fields_are_one_line(tmp_path: Path, workload: dict, says: str) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(_scenario(tmp_path, workload))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_profile_or_auto_dilation_is_refused_for_an_own_job(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="accelerator.dilation: auto"):
        load_scenario(_scenario(tmp_path, {"command": ["python", "job.py"]},
                                accelerator={"step_ms": 5}))
    scn = load_scenario(_scenario(tmp_path, {"command": ["python", "job.py"]},
                                  accelerator={"step_ms": 5, "dilation": 2}))
    assert scn.accelerator.step_ms == 5


def test_cross_traffic_that_shares_no_link_with_training_is_a_warning(tmp_path: Path) -> None:
    away = {"at_s": 1, "kind": "cross_start", "id": "bulk", "src": "x0", "dst": "x1", "streams": 2}
    path = _scenario(tmp_path, {"command": ["python", "job.py"]}, timeline=[away])
    scn = load_scenario(path)
    (line,) = scn.warnings()
    assert "x0 -> x1" in line and "cannot congest the job" in line
    # the CLI says it before anything runs (show, run --dry-run)
    for args in (["show", str(path)], ["run", str(path), "--dry-run"]):
        p = subprocess.run([str(NETSENSE), *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "warning: scenario own: timeline[0] (cross_start 'bulk')" in p.stderr
    into = dict(away, dst="w1")
    assert load_scenario(_scenario(tmp_path, {"command": ["python", "job.py"]},
                                   timeline=[into])).warnings() == []


def test_a_dumbbells_cross_traffic_over_the_bottleneck_is_no_warning() -> None:
    scn = validate_scenario({
        "name": "d", "topology": {"kind": "dumbbell", "n_left": 1, "n_right": 1, "n_cross": 2,
                                  "bottleneck_mbit": 50},
        "workload": {"model": "mlp", "steps": 5}, "methods": ["fp16"],
        "timeline": [{"at_s": 1, "kind": "cross_start", "id": "b", "src": "x0", "dst": "x1",
                      "streams": 2}]})
    assert scn.warnings() == []  # x0 (left) -> x1 (right) crosses the bottleneck


def test_readme_section_3s_example_congests_the_job() -> None:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## 3. Your own scenario"):text.index("## 4.")]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    scn = validate_scenario(yaml.safe_load(block), skip_kernel_checks=True)
    assert any(e.kind == "cross_start" for e in scn.timeline)
    assert scn.warnings() == []


def test_a_misspelled_method_plugin_is_refused_by_show_and_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"name": "m", "topology": STAR,
                                    "workload": {"model": "mlp", "steps": 3},
                                    "methods": ["my_codecz:ScaledSign"]}))
    for args in (["show", str(path)], ["run", str(path), "--dry-run"],
                 ["run", "smoke", "--dry-run", "-m", "nst_no_such:Codec"]):
        p = subprocess.run([str(NETSENSE), *args], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ))
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "not found on the Python path" in lines[0], p.stderr


def test_a_timeline_denser_than_the_host_applies_is_refused_with_the_rate(tmp_path: Path) -> None:
    trace = tmp_path / "dense.csv"  # 10 000 rate changes in 5 s
    trace.write_text("".join(f"{i * 0.0005:.4f},{10 + i % 7}\n" for i in range(10_000)))
    data = {"name": "dense", "topology": STAR, "workload": {"model": "mlp", "time_limit_s": 10},
            "methods": ["fp16"], "timeline": [{"at_s": 0, "kind": "trace", "link": "w1",
                                               "file": str(trace)}]}
    with pytest.raises(ScenarioError) as e:
        validate_scenario(data)
    msg = str(e.value)
    assert f"at most {MAX_RATE_CHANGES_PER_S} per second" in msg and "\n" not in msg
    assert "rate changes within 1 s" in msg
    slow = tmp_path / "slow.csv"  # one change a second: applied
    slow.write_text("".join(f"{i},{10 + i % 7}\n" for i in range(5)))
    data["timeline"][0]["file"] = str(slow)
    validate_scenario(data)
