"""Real training workers on loopback: ``world`` processes of ``python -m workloads.train``
(torch.distributed gloo, env:// rendezvous on a free port), their records and their output.

``TINY`` holds tiny versions of the three models, each with the dataset it is meant for
(the knobs that make them tiny are the same ones the testbed uses): a fresh launch costs
~3-5 s of interpreter + torch import per rank, so runs are short. Given a ``zygote`` (the
session's pre-imported ``workloads.zygote``, tests/conftest.py) each rank is forked from it
instead, as the testbed starts its workers, and starts in milliseconds: for tests of what
a worker records and computes. A test of the process itself (its exit, its interpreter's
finalization, ``PYTHONPATH`` plugins: a fork keeps the zygote's ``sys.path``) starts fresh
processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from netsenseml import lifecycle
from testbed.common.ports import free_port
from testbed.orchestration import launcher

REPO = Path(__file__).resolve().parents[2]

TINY = {
    "mlp": ["--model", "mlp", "--width", "64", "--dataset", "digits"],
    "resnet18": ["--model", "resnet18", "--width", "4", "--dataset", "synthetic",
                 "--eval-samples", "64"],
    "gpt": ["--model", "gpt", "--layers", "1", "--d-model", "32", "--context", "32",
            "--dataset", "text", "--eval-samples", "64"],
}


def start_ranks(tmp: Path, args: list[str], world: int = 2,
                zygote: launcher.Zygote | None = None) -> list[subprocess.Popen | launcher.ForkedWorker]:
    """Start ``world`` workers on loopback (forked from ``zygote`` when given); stdout+stderr
    of rank N go to tmp/rankN.out."""
    port = free_port()
    procs: list[subprocess.Popen | launcher.ForkedWorker] = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        if zygote is not None:
            procs.append(zygote.spawn(["--log-dir", str(tmp / "logs"), *args], env=env,
                                      cwd=str(REPO), log=tmp / f"rank{rank}.out", netns_pid=None))
            continue
        out = open(tmp / f"rank{rank}.out", "w")  # noqa: SIM115 (closed by the child's exit)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "workloads.train", "--log-dir", str(tmp / "logs"), *args],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
        out.close()
    return procs


def run_ranks(tmp: Path, args: list[str], world: int = 2, timeout: float = 120,
              zygote: launcher.Zygote | None = None) -> list[int]:
    """Run workers to completion (forked from ``zygote`` when given); returns exit codes.
    Kills (by PID) whatever overruns."""
    procs = start_ranks(tmp, args, world, zygote)
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def read_log(tmp: Path, rank: int) -> list[dict]:
    lines = (tmp / "logs" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def outputs(tmp: Path, world: int = 2) -> str:
    return "\n".join((tmp / f"rank{r}.out").read_text() for r in range(world))


@contextmanager
def gloo_group(rank: int, world: int, port: int) -> Iterator[None]:
    """In a process of its own (``torch.multiprocessing.spawn``'s): rank ``rank`` of a gloo
    group of ``world`` on loopback port ``port``, one intra-op thread, destroyed after."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        yield
    finally:
        lifecycle.destroy_group()
