"""DDP's start-up broadcast is skipped only when every rank already holds the same model.

Why: over a dilated emulated link the broadcast sends the whole model to each rank at
``1/k`` of the rate (minutes at the paper's sizes) to change nothing when every rank built
the model after the same seed; but a rank that built another model must still get rank 0's,
or DDP would train replicas that never agree. Two real gloo ranks on loopback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from netsenseml import lifecycle
from testbed.common.ports import free_port

#: (rank 0's seed, rank 1's seed) of each case: the same model on both ranks, or not
CASES = [(3, 3), (3, 4)]


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from workloads import train

        for case, seeds in enumerate(CASES):  # one model after another, as separate runs
            torch.manual_seed(seeds[rank])
            model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4))
            same = train._same_start(model, torch.device("cpu"))
            ddp = train.DDP(model, init_sync=not same)
            torch.save({"same": same, "weight": ddp.module[0].weight.detach().clone()},
                       f"{out}/case{case}-rank{rank}.pt")
            del ddp
    finally:
        lifecycle.destroy_group()  # drained first: gloo's exit race (netsenseml.lifecycle)


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both cases' models built and wrapped by two real ranks (spawned once for both)."""
    out = tmp_path_factory.mktemp("same-start")
    mp.start_processes(_rank, args=(free_port(), str(out)), nprocs=2, start_method="spawn")
    return out


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"seeds{i}" for i in range(len(CASES))])
def test_ranks_skip_the_start_up_broadcast_only_when_they_agree(started: Path, case: int) -> None:
    seeds = CASES[case]
    r0, r1 = (torch.load(started / f"case{case}-rank{r}.pt") for r in (0, 1))
    assert r0["same"] == r1["same"] == (seeds[0] == seeds[1])
    assert torch.equal(r0["weight"], r1["weight"])  # skipped or not, the replicas agree
