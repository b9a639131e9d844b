"""Executors without a cluster: bad --executor input, and the atomic install of a shipped run
folder (what the Ray executor does with each task's tar)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testbed.config.sweep import SweepError
from testbed.orchestration.executors import LocalExecutor, RayExecutor, parse_executor
from testbed.orchestration.staged import incoming_path, install_tar, pack, replaced_path


def test_parse_executor() -> None:
    assert isinstance(parse_executor("local"), LocalExecutor)
    ray = parse_executor("ray:10.0.0.5:6379", retries=3)
    assert isinstance(ray, RayExecutor) and ray.address == "10.0.0.5:6379" and ray.retries == 3
    assert parse_executor("ray").address is None
    with pytest.raises(SweepError, match="--executor: unknown executor 'slurm'"):
        parse_executor("slurm")
    with pytest.raises(SweepError, match="--retries"):
        parse_executor("ray", retries=-1)


def test_cli_refuses_unknown_executor_in_one_line(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "sweep", "tiny", "--results",
                          str(tmp_path), "--executor", "slurm"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "unknown executor 'slurm'" in res.stderr
    assert "Traceback" not in res.stderr and not any(tmp_path.iterdir())


def _folder(root: Path, status: str) -> Path:
    (root / "workers").mkdir(parents=True)
    (root / "summary.json").write_text(json.dumps({"status": status}))
    (root / "workers" / "rank0.jsonl").write_text('{"step": 1}\n')
    return root


def test_install_replaces_a_failed_attempt_and_clears_partials(tmp_path: Path) -> None:
    shipped = pack(_folder(tmp_path / "node" / "run", "ok"))
    run_dir = tmp_path / "results" / "exp" / "allreduce-s0"
    _folder(run_dir, "failed")
    (run_dir / "stale.txt").write_text("from the failed attempt")
    incoming_path(run_dir).mkdir()  # left by a driver killed half-way
    (incoming_path(run_dir) / "junk").write_text("x")
    install_tar(shipped, run_dir, {"sweep.json": {"sweep": "s"}})
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    assert json.loads((run_dir / "sweep.json").read_text()) == {"sweep": "s"}
    assert (run_dir / "workers" / "rank0.jsonl").read_text() == '{"step": 1}\n'
    assert not (run_dir / "stale.txt").exists()
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["allreduce-s0"]
    assert not replaced_path(run_dir).exists()


def test_install_refuses_members_outside_the_folder(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"evil"
        info = tarfile.TarInfo("../outside.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    run_dir = tmp_path / "r" / "run"
    with pytest.raises(tarfile.TarError):
        install_tar(buf.getvalue(), run_dir, {})
    assert not (tmp_path / "r" / "outside.txt").exists() and not run_dir.exists()
    assert not incoming_path(run_dir).exists()
