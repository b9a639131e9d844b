"""The training worker, run for real: 2 processes per run, torch.distributed gloo on loopback.

The runs whose records and learning are checked fork their ranks from the session's zygote
(as the testbed does; ``test_launcher`` holds a forked worker to a fresh one), the others
start fresh processes (a bad argument's exit, a killed peer): a fresh launch costs ~3-5 s
of interpreter + torch import per rank, so runs are short and the models tiny (the knobs
that make them tiny are the same ones the testbed uses).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.workloads.ranks import REPO, TINY, outputs, read_log, run_ranks, start_ranks
from workloads import records as worker_records

STEP_KEYS = {"kind", "t", "wall", "step", "samples", "compute_s", "comm_s", "step_s",
             "bytes_sent", "kept_ratio", "level", "loss"}
START_KEYS = {"kind", "rank", "world_size", "model", "dataset", "method", "params", "grad_bytes",
              "batch_size", "seed", "wall", "host", "torch"}
EVAL_KEYS = {"kind", "t", "wall", "step", "accuracy", "loss"}
SUMMARY_KEYS = {"kind", "t", "wall", "steps", "samples", "status", "final_accuracy",
                "train_time_s"}


@pytest.mark.parametrize("method", ["allreduce", "topk:0.01", "netsenseml"])
@pytest.mark.parametrize("model", ["mlp", "resnet18", "gpt"])
def test_two_workers_log_every_step(tmp_path: Path, model: str, method: str, zygote) -> None:
    # mlp x netsenseml also covers --time-limit: ranks must still agree on the step count.
    limit = ["--time-limit", "1.5"] if (model, method) == ("mlp", "netsenseml") else ["--steps", "3"]
    codes = run_ranks(tmp_path, [*TINY[model], "--method", method, *limit, "--batch-size", "8",
                                 "--seed", "1", "--eval-every", "2"], zygote=zygote)
    assert codes == [0, 0], outputs(tmp_path)
    logs = [read_log(tmp_path, r) for r in range(2)]
    for rank, recs in enumerate(logs):
        start, summary = recs[0], recs[-1]
        assert START_KEYS <= start.keys() and start["kind"] == "start"
        assert (start["rank"], start["world_size"], start["method"]) == (rank, 2, method)
        assert start["grad_bytes"] == 4 * start["params"] > 0
        steps = [r for r in recs if r["kind"] == "step"]
        assert [r["step"] for r in steps] == list(range(1, len(steps) + 1))
        assert len(steps) >= 3
        for r in steps:
            assert STEP_KEYS <= r.keys(), STEP_KEYS - r.keys()
            assert r["samples"] == 16 and r["bytes_sent"] > 0 and 0 < r["kept_ratio"] <= 1
            assert r["step_s"] >= r["comm_s"] >= 0 and r["compute_s"] >= 0
            assert r["loss"] > 0 and isinstance(r["level"], str)
        if method == "allreduce":  # dense fp32: at least the whole gradient leaves each rank
            assert all(r["bytes_sent"] >= start["grad_bytes"] for r in steps)
        if method == "topk:0.01":  # 1 % of values (+indices) is far below the dense gradient
            assert all(r["bytes_sent"] < start["grad_bytes"] / 4 for r in steps)
        ts = [r["t"] for r in recs[1:]]
        assert ts == sorted(ts)
        evals = [r for r in recs if r["kind"] == "eval"]
        assert evals and all(EVAL_KEYS <= r.keys() and 0 <= r["accuracy"] <= 1 for r in evals)
        assert [r["step"] for r in evals if r["step"] % 2 == 0] == list(range(2, len(steps) + 1, 2))
        assert SUMMARY_KEYS <= summary.keys() and summary["kind"] == "summary"
        assert summary["status"] == "ok" and summary["steps"] == len(steps)
        assert summary["samples"] == 16 * len(steps)
    assert logs[0][-1]["steps"] == logs[1][-1]["steps"]
    for recs in logs:  # the file is exactly what the typed records write
        assert [worker_records.parse(r).to_json() for r in recs] == recs
    # evaluation is global (counts summed over ranks), so both ranks report the same accuracy
    assert logs[0][-1]["final_accuracy"] == pytest.approx(logs[1][-1]["final_accuracy"])
    assert f"params={logs[0][0]['params']}" in outputs(tmp_path)


def _digits(tmp: Path, method: str, steps: int, zygote) -> list[dict]:
    codes = run_ranks(tmp, ["--model", "mlp", "--width", "256", "--dataset", "digits",
                            "--method", method, "--steps", str(steps), "--batch-size", "32",
                            "--seed", "0", "--eval-every", "25", "--target-accuracy", "0.9"],
                      zygote=zygote)
    assert codes == [0, 0], outputs(tmp)
    return [r for r in read_log(tmp, 0) if r["kind"] == "eval"]


def test_digits_allreduce_reaches_90_percent(tmp_path: Path, zygote) -> None:
    evals = _digits(tmp_path, "allreduce", 100, zygote)
    reached = [r for r in evals if r["reached_target"]]
    assert reached, [r["accuracy"] for r in evals]
    assert all(r["accuracy"] >= 0.9 for r in reached)
    assert read_log(tmp_path, 0)[-1]["target_reached_t"] == pytest.approx(reached[0]["t"], abs=1)


def test_digits_topk_with_error_feedback_learns(tmp_path: Path, zygote) -> None:
    evals = _digits(tmp_path, "topk:0.01", 100, zygote)
    assert max(r["accuracy"] for r in evals) >= 0.85, [r["accuracy"] for r in evals]


@pytest.mark.parametrize("bad, named", [
    (["--model", "vgg"], "--model"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--method", "zip:3"], "--method"),
])
def test_bad_argument_exits_2_with_one_line(tmp_path: Path, bad: list[str], named: str) -> None:
    args = ["--model", "mlp", "--dataset", "digits", "--method", "allreduce", "--steps", "1",
            "--batch-size", "8", "--seed", "0", "--log-dir", str(tmp_path / "logs")]
    i = args.index(bad[0])
    args[i + 1] = bad[1]
    p = subprocess.run([sys.executable, "-m", "workloads.train", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, WORLD_SIZE="1", RANK="0"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and bad[1] in lines[0], p.stderr
    accepted = {"--model": "resnet18", "--dataset": "synthetic", "--method": "topk"}[named]
    assert accepted in lines[0]
    assert not (tmp_path / "logs").exists()


def test_killed_peer_makes_survivor_exit_nonzero(tmp_path: Path) -> None:
    pg_timeout = 10.0
    procs = start_ranks(tmp_path, [*TINY["mlp"], "--method", "allreduce", "--steps", "1000000",
                                   "--batch-size", "8", "--seed", "0",
                                   "--pg-timeout", str(pg_timeout)])
    try:
        log1 = tmp_path / "logs" / "rank1.jsonl"
        deadline = time.monotonic() + 60
        while not (log1.exists() and log1.read_text().count('"step"') >= 5):
            assert time.monotonic() < deadline and procs[0].poll() is None, outputs(tmp_path)
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = procs[0].wait(timeout=pg_timeout + 20)
        took = time.monotonic() - killed
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert code not in (0, None), outputs(tmp_path)
    assert took < pg_timeout + 20
    summary = read_log(tmp_path, 0)[-1]
    assert summary["kind"] == "summary" and summary["status"] == "failed" and summary["error"]
    print(f"survivor exited {code} {took:.1f} s after its peer was killed")
