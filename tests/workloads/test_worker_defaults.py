"""``python -m workloads.train`` runs with only a model, a dataset and a method, as torch's
examples do: batch size, seed, log folder and length have defaults; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys


def test_worker_runs_with_defaults_and_prints_whole_lines(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "workloads.train", "--model", "mlp", "--dataset", "digits",
         "--method", "topk:0.01", "--steps", "3", "--width", "64"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("rank 0: done steps=3 "), lines
    assert all(line.startswith("rank ") for line in lines), lines
    log = tmp_path / "runs" / "mlp-digits-topk-0.01-s0" / "rank0.jsonl"
    start = json.loads(log.read_text().splitlines()[0])
    assert (start["batch_size"], start["seed"]) == (32, 0)


def test_worker_bad_argument_is_one_error_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "workloads.train", "--steps", "0"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: argument --steps"), proc.stderr
    assert not (tmp_path / "runs").exists()
