"""An own job's records, written by the hook where the testbed says (``netsenseml.job``):
real ``torchrun`` processes running ``tests/jobs/tiny_job.py`` (a user's script, not the
built-in worker), read back with ``workloads.records`` as the testbed reads them.

Also: the run's method reaching ``hooks.register(model)`` (``NETSENSE_METHOD``) and today's
default without it; ``hooks.report`` records; the own job's pacing of bucket 0; and a
compressor plug-in whose ``compress`` hangs, reported by the worker as user code that did
not return (not as a slow link).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from netsenseml import accelerator, clock
from workloads.records import RankRecords

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "jobs" / "tiny_job.py"


def _torchrun(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    full = {k: v for k, v in os.environ.items() if not k.startswith("NETSENSE_")}
    full.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **env)
    return subprocess.run([*cmd, "--standalone", "--nproc-per-node", "2", str(JOB), *args],
                          cwd=cwd, env=full, capture_output=True, text=True, timeout=240)


def _records(folder: Path, rank: int) -> tuple[list[dict], RankRecords]:
    raw = [json.loads(line) for line in (folder / f"rank{rank}.jsonl").read_text().splitlines()]
    return raw, RankRecords.parse(raw)


def test_the_runs_method_reaches_register_and_the_hook_writes_the_records(tmp_path: Path) -> None:
    out = tmp_path / "workers"
    p = _torchrun(["--steps", "12"], {"NETSENSE_METHOD": "fp16", "NETSENSE_RECORDS": str(out),
                                      "NETSENSE_TARGET_ACCURACY": "0.4"}, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: method fp16" in p.stdout and "rank 1: method fp16" in p.stdout
    for rank in (0, 1):
        raw, recs = _records(out, rank)
        assert raw[0]["kind"] == "start" and raw[-1]["kind"] == "summary"
        assert recs.start.method == "fp16" and recs.start.rank == rank
        assert recs.start.world_size == 2 and recs.start.grad_bytes == 4 * recs.start.params
        assert [s.step for s in recs.steps] == list(range(1, 13))
        for s in recs.steps:  # the built-in worker's fields, from the hook
            assert s.level == "fp16" and s.samples == 64 and s.loss is not None
            assert s.bytes_sent == recs.start.grad_bytes // 2  # fp16: half the fp32 gradient
            assert s.step_s > 0 and s.comm_s <= s.step_s
            assert abs(s.compute_s - (s.step_s - s.comm_s)) < 1e-9
            assert s.stats["collectives"] >= 1 and "codec_s" in s.stats
        ts = [s.t for s in recs.steps]
        assert ts == sorted(ts) and recs.steps[0].t > 0
        # hooks.report(accuracy=...) at steps 10 and 12: evaluation records on those steps
        assert [e.step for e in recs.evals] == [10, 12]
        assert all(0 <= e.accuracy <= 1 for e in recs.evals)
        assert recs.summary.status == "ok" and recs.summary.steps == 12
        assert recs.summary.samples == 12 * 64
        assert recs.summary.final_accuracy == recs.evals[-1].accuracy
        assert recs.summary.train_time_s >= recs.steps[-1].t - 1e-6
        reached = [e for e in raw if e["kind"] == "eval" and e.get("reached_target")]
        if reached:
            assert recs.summary.target_reached_t is not None


def test_outside_the_testbed_register_keeps_todays_default_and_writes_nothing(tmp_path: Path) -> None:
    p = _torchrun(["--steps", "3"], {}, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0: method allreduce" in p.stdout
    assert not list(tmp_path.rglob("*.jsonl"))


def test_a_job_that_reports_nothing_still_gets_steps_bytes_and_samples(tmp_path: Path) -> None:
    out = tmp_path / "workers"
    p = _torchrun(["--steps", "5", "--no-report"],
                  {"NETSENSE_METHOD": "topk:0.1", "NETSENSE_RECORDS": str(out)}, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    _, recs = _records(out, 0)
    assert len(recs.steps) == 5 and not recs.evals
    # the samples: the batch the hook saw the model's training forwards given (32 a rank,
    # the evaluation's forward under no_grad not counted), x 2 ranks
    assert all(s.samples == 64 and s.loss is None and s.bytes_sent > 0 for s in recs.steps)
    assert all(s.level == "topk" for s in recs.steps)
    assert recs.summary.status == "ok" and recs.summary.final_accuracy is None
    assert recs.summary.samples_from == "model input" and recs.start.own_job is True


def test_an_own_jobs_bucket_0_is_held_until_optimizer_and_forward_took_their_slot() -> None:
    timing = accelerator.Timing.from_step(0.2)  # forward 60 ms, backward 120, optimizer 20
    pacer = accelerator.Pacer(timing, 100, own_job=True)
    pacer.start_own_step(None)  # the first step: anchored at bucket 0, nothing held
    t = clock.now()
    pacer.bucket(50)
    assert clock.now() - t < 0.01
    pacer.bucket(50)  # released at the profile's share: half the backward after bucket 0
    assert 0.05 <= clock.now() - t < 0.1
    first = pacer.pop()
    assert first["pace_overrun"] == 0
    end = clock.now()
    pacer.start_own_step(end)  # the previous backward ended now
    pacer.bucket(50)  # held for optimizer 20 + forward 60 + half the backward 60 ms
    assert 0.13 <= clock.now() - end < 0.2
    assert pacer.pop()["pace_wait_s"] > 0.1


def test_a_compressor_plugin_whose_compress_hangs_is_named_as_user_code(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "jobs"), str(REPO)])
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "workloads.train", "--model", "mlp", "--dataset", "digits",
         "--method", "hang_codec:HangAt3", "--time-limit", "1", "--batch-size", "8",
         "--log-dir", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120)
    assert p.returncode == 1, p.stderr
    summary = json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[-1])
    assert summary["status"] == "failed"
    err = summary["error"]
    assert "user code that did not return" in err, err
    assert "hang_codec:HangAt3" in err and "compress()" in err, err
    assert "link dead" not in err
    assert time.monotonic() - t0 < 60  # the limit's grace (8 s) after a 1 s limit, imports
