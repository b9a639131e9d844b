"""``python -m workloads.profile``: a profile entry measured on this machine's CPU, in the
format the pacer reads, and DDP's buckets as DDP really builds them.

Real runs of the module (a few steps of the tiny mlp, one thread), no mocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from netsenseml import accelerator
from testbed.common.ports import free_port

REPO = Path(__file__).resolve().parents[2]
TINY = ["--model", "mlp", "--dataset", "mixture", "--batch-size", "16",
        "--model-args", "width=32", "--device", "cpu", "--steps", "3", "--threads", "1",
        "--codecs", "fp16,int8,topk:0.01"]


def profile(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "workloads.profile", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=240)


def test_the_worker_measures_an_entry_the_pacer_reads() -> None:
    proc = profile(*TINY)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    prof = accelerator.parse({"format": 1, "device": "cpu", "source": "test",
                              "entries": [entry]}, "t")
    timing = prof.timing("mlp", {"width": 32}, 16)
    assert timing.origin == "measured"
    assert timing.forward_s > 0 and timing.backward_s > 0 and timing.optimizer_s > 0
    assert set(timing.codec_s_per_mb) == {"fp16", "int8", "topk"}
    assert all(v > 0 for v in timing.codec_s_per_mb.values())
    assert timing.buckets is not None and len(timing.buckets) == 1  # 31 kB: one bucket
    assert entry["knobs"] == {"width": 32}
    for fact in ("torch", "1 CPU threads", "3 steps", "dataset mixture"):
        assert fact in timing.note


def test_the_worker_prints_a_whole_profile_with_as_profile(tmp_path: Path) -> None:
    proc = profile(*TINY, "--codecs", "", "--as-profile", "mine")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    prof = accelerator.load(str(path))
    assert prof.name == "mine" and data["format"] == 1
    assert "netsense profile" in prof.source and prof.device in prof.source
    assert prof.entries[0].timing.codec_s_per_mb == {}


def test_the_worker_refuses_bad_input_in_one_line() -> None:
    proc = profile("--model", "nosuch", "--dataset", "mixture", "--batch-size", "4",
                   "--steps", "1", "--threads", "1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "mlp" in lines[0]
    assert proc.stdout == ""


DDP_CHECK = """
import json, os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from workloads import host_timing
from workloads.profile import GradReady, ddp_buckets
job = host_timing.build_job("mlp", "mixture", 16, "width=700")
params = [p for p in job.model.parameters()]
ready = GradReady(params, torch.device("cpu"))
host_timing.time_steps(job, 1, warmup=0, observer=ready)
ours = [sum(params[i].numel() for i in b) for b in ddp_buckets(params, [i for i, _ in ready.passes[0]])]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
ddp = DDP(job.model)
seen = []
def hook(state, bucket):
    seen.append(bucket.buffer().numel())
    fut = torch.futures.Future(); fut.set_result(bucket.buffer()); return fut
ddp.register_comm_hook(None, hook)
x, y = next(iter(job.loader))
for _ in range(3):
    seen.clear()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
print(json.dumps({"ours": ours, "ddp": seen}))
dist.destroy_process_group()
"""


def test_the_buckets_are_the_ones_ddp_builds() -> None:
    """After its first step DDP rebuilds its buckets in the gradients' ready order; the
    profile's bucket list must be those buckets (the width makes the gradient cross DDP's
    1 MiB first-bucket cap, so there are two or more)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-c", DDP_CHECK], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["ours"]) >= 2
    assert out["ours"] == out["ddp"]
