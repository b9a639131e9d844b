"""The model registry and a user's model given by import path, from a file outside the package.

The plug-in file is the worked example of workloads/README.md, extracted from it, so the
documented example is the one that is run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from netsenseml import methods
from tests.workloads.ranks import REPO, outputs, read_log, run_ranks
from workloads import registry
from workloads.models import build_model, model_info


def example_source() -> str:
    text = (REPO / "workloads" / "README.md").read_text()
    m = re.search(r"<!-- plugin-example: my_models.py.*?-->\n```python\n(.*?)```\n"
                  r"<!-- end plugin-example -->", text, re.S)
    assert m, "workloads/README.md lost its plug-in example"
    return m.group(1)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """my_models.py in a folder on PYTHONPATH (for the workers) and sys.path (in-process)."""
    folder = tmp_path / "userpkg"
    folder.mkdir()
    (folder / "my_models.py").write_text(example_source())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("my_models", None)


def deep_mlp_params(d: int, c: int, hidden: int, depth: int) -> int:
    return d * hidden + hidden + (depth - 1) * (hidden * hidden + hidden) + hidden * c + c


def test_plugin_factory_from_outside_the_package_trains_on_two_ranks(
        plugin_dir: Path, tmp_path: Path) -> None:
    codes = run_ranks(tmp_path, ["--model", "my_models:deep_mlp", "--model-args",
                                 "hidden=48,depth=3", "--dataset", "mixture", "--method",
                                 "topk:0.1", "--steps", "4", "--batch-size", "8", "--seed", "1",
                                 "--eval-every", "2", "--eval-samples", "64"])
    assert codes == [0, 0], outputs(tmp_path)
    for rank in range(2):
        recs = read_log(tmp_path, rank)
        start, summary = recs[0], recs[-1]
        # the parameter count proves the user's architecture, with the given knobs, was built
        assert start["params"] == deep_mlp_params(256, 300, 48, 3)
        assert start["model"] == "my_models:deep_mlp"
        assert start["knobs"] == {"hidden": 48, "depth": 3}
        assert (start["optimizer"], start["lr"], start["momentum"]) == ("sgd", 0.05, 0.9)
        steps = [r for r in recs if r["kind"] == "step"]
        assert [r["step"] for r in steps] == [1, 2, 3, 4]
        assert all(r["loss"] > 0 and r["kept_ratio"] < 0.2 for r in steps)  # top-k ran on it
        assert summary["status"] == "ok" and summary["steps"] == 4


def test_plugin_model_entry_declares_its_defaults(plugin_dir: Path) -> None:
    entry = registry.model_entry("my_models:DEEP_MLP")
    assert (entry.lr, entry.kinds, dict(entry.knobs)) == (0.02, ("image", "vector"),
                                                         {"hidden": 256, "depth": 2})
    model = build_model("my_models:DEEP_MLP", input_shape=(1, 8, 8), num_classes=10, depth=1)
    assert model_info(model).params == deep_mlp_params(64, 10, 256, 1)
    with pytest.raises(registry.RegistryError, match="no knob width; its knobs: hidden, depth"):
        build_model("my_models:DEEP_MLP", input_shape=(64,), num_classes=10, width=3)
    plain = registry.model_entry("my_models:deep_mlp")  # a bare factory gets the defaults
    assert (plain.optimizer, plain.lr, plain.kinds) == ("sgd", 0.05, registry.KINDS)


@pytest.mark.parametrize("name, message", [
    ("no_such_module_xyz:f", "module 'no_such_module_xyz' not found"),
    ("my_models:absent", "has no attribute 'absent'"),
    ("my_models:math", "is a module, not a factory or ModelEntry"),
    ("my_models", "unknown; accepted: mlp, resnet18, resnet20, gpt"),
    ("my models:f", "not of the form package.module:factory"),
])
def test_bad_plugin_names_fail_in_one_line(plugin_dir: Path, name: str, message: str) -> None:
    with pytest.raises(registry.RegistryError, match=re.escape(message)) as err:
        registry.model_entry(name)
    assert "\n" not in str(err.value)


def test_worker_refuses_a_missing_factory_with_exit_2(plugin_dir: Path, tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "workloads.train", "--model", "my_models:absent", "--dataset",
         "digits", "--method", "allreduce", "--steps", "1", "--batch-size", "8", "--seed", "0",
         "--log-dir", str(tmp_path / "logs")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, WORLD_SIZE="1", RANK="0"))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model" in lines[0] and "absent" in lines[0], p.stderr
    assert not (tmp_path / "logs").exists()


def test_registry_names_and_pairings_are_importable_without_torch() -> None:
    code = ("import sys, workloads.registry as r; r.check_model_name('mlp'); "
            "r.check_model_name('json:dumps'); "
            "e = r.model_entry('gpt'); "
            "print(','.join(r.model_names()), ','.join(r.datasets_for(e)), "
            "'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["mlp,resnet18,resnet20,gpt,resnet18-imagenet,vgg16,gpt2-small",
                                "text,gpt2-synth,openwebtext", "False"]


def test_knob_strings_are_typed() -> None:
    assert registry.parse_knobs("width=512, lr-scale=0.5,bias=false,act=gelu") == {
        "width": 512, "lr_scale": 0.5, "bias": False, "act": "gelu"}
    with pytest.raises(registry.RegistryError, match="expected name=value"):
        registry.parse_knobs("width")


def test_scenario_names_a_plugin_model_and_the_worker_argv_carries_it(plugin_dir: Path) -> None:
    from testbed.config.scenario import validate_scenario
    from testbed.orchestration.run import worker_argv

    scn = validate_scenario({
        "name": "plugin", "topology": {"kind": "star", "n_workers": 2, "rate_mbit": 100},
        "workload": {"model": "my_models:deep_mlp", "dataset": "mixture", "batch_size": 8,
                     "steps": 3, "args": {"model-args": "hidden=32,depth=1"}},
        "methods": ["allreduce"], "seeds": [0]}, skip_kernel_checks=True)
    argv = worker_argv(scn, methods.parse("allreduce"), 0, plugin_dir / "logs")
    assert argv[argv.index("--model") + 1] == "my_models:deep_mlp"
    assert argv[argv.index("--model-args") + 1] == "hidden=32,depth=1"
