"""``netsense convergence``: real gloo ranks on loopback write the table netsenseml loads."""

import json
from pathlib import Path

import pytest

from netsenseml import convergence
from tests.cli.invoke import netsense


def test_convergence_writes_a_table_the_policy_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "conv.json"
    args = ["convergence", "smoke", "--set", "workload.args.width=64", "--set", "workload.eval_every=50", "--levels", "none,topk:0.01",
            "--seeds", "0", "--max-steps", "150", "-r", str(tmp_path / "r"), "--out", str(out)]
    result = netsense(args, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["format"] == convergence.FORMAT and data["world_size"] == 2
    assert list(data["levels"]) == ["none", "topk:0.01"]
    none = data["levels"]["none"]
    assert none["method"] == "allreduce" and none["runs"] == 1
    # steps to the target are multiples of eval_every (50), or null at the cap
    for row in data["levels"].values():
        assert all(s is None or (s % 50 == 0 and 0 < s <= 150) for s in row["steps"])
    prior = convergence.load(out)
    assert prior.factor("topk", 0.01) == pytest.approx(data["factors"]["topk:0.01"])
    # a second call reuses the finished runs (no new training): same table; made by the
    # command's old name, which still works
    again = netsense(["calibrate", *args[1:]], tmp_path, monkeypatch)
    assert again.exit_code == 0 and "seed 0:" not in again.output
    assert json.loads(out.read_text())["levels"] == data["levels"]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--levels", "fp16"], "--levels: need 'none'"),
    (["--levels", "none,topk:2"], "--levels: topk:2"),
    (["--seeds", "x"], "--seeds"),
    (["--set", "workload.target_accuracy=null"], "target_accuracy"),
])
def test_bad_input_is_one_line_and_runs_nothing(extra, needle, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    result = netsense(["convergence", "smoke", "-r", str(tmp_path / "r"), *extra], tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    err = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and needle in err[0], result.output
    assert not list((tmp_path / "r").rglob("rank0.jsonl"))
