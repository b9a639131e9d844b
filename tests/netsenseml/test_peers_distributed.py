"""The adaptive peers through the real DDP hook: 2 gloo ranks on loopback, the two-bucket
model, a few steps (issue 49). Each peer runs, its records show its levels, every rank
takes the same decisions, and the bytes counted are the bytes handed to torch.distributed.
Accordion's norms are checked against each rank's own sum of its local gradients.
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import lifecycle
from testbed.common.ports import free_port
from tests.netsenseml.ddp_harness import CollectiveSpy, backward, two_bucket_model


def _same_on_every_rank(value: object, world: int) -> None:
    everyone: list[object] = [None] * world
    dist.all_gather_object(everyone, value)
    assert all(x == value for x in everyone), f"ranks took different decisions: {everyone}"


def _sgd(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad


def _stellatrain(rank: int, world: int) -> None:
    """From its start (top-k 0.01) to the fraction its first decision fitted to the
    loopback's goodput, sent from step 1 + 3 on (warm-up 1, the original's delay 3)."""
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    state = hooks.register(ddp, "stellatrain", warmup=1, settle=1)
    levels, stats = [], []
    with CollectiveSpy() as spy:
        for step in range(8):
            backward(ddp, rank, step)
            _sgd(ddp)
            s = state.pop_step_stats()
            assert s["bytes_sent"] == spy.pop(), (step, s)
            levels.append((s["level"], round(s["ratio"], 6)))
            stats.append(s)
    policy = state.policy
    assert policy.calibration is not None and policy.calibration.world_size == world
    assert levels[:3] == [("topk", 0.01)] * 3, levels
    first = policy.decided[0]
    assert first[0] == 1
    want = ("none", 1.0) if first[1] >= 1 else ("topk", round(first[1], 6))
    assert levels[3] == want, (levels, policy.decided)
    assert 0.005 < stats[0]["kept_ratio"] < 0.015  # what the buckets really kept
    assert stats[-1]["stella_target_mbit"] > 0 and "stella_wait_share" in stats[-1]
    assert all(torch.isfinite(p).all() for p in ddp.parameters())
    _same_on_every_rank((levels, policy.decided), world)
    if rank == 0:
        print(f"stellatrain levels: {levels}; decisions {policy.decided}")


def _accordion(rank: int, world: int) -> None:
    """Windows of 2 steps; a threshold no change reaches, so every bucket goes heavy once
    two windows compare: steps 1-5 light (none), then top-k 0.1. The norms the policy got
    are the mean over ranks of each rank's own window sum of its local gradients."""
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    plain = two_bucket_model()
    state = hooks.register(ddp, "accordion", interval=2, threshold=1e9)
    params = list(ddp.module.parameters())
    sums = {id(p): torch.zeros_like(p) for p in params}
    levels, stats = [], []
    with CollectiveSpy() as spy:
        for step in range(7):
            plain.load_state_dict(ddp.module.state_dict())
            backward(plain, rank, step)  # this rank's local gradient, as the hook saw it
            if step in (4, 5):  # the third window: steps 5 and 6
                for p, q in zip(params, plain.parameters(), strict=True):
                    sums[id(p)] += q.grad
            backward(ddp, rank, step)
            _sgd(ddp)
            s = state.pop_step_stats()
            assert s["bytes_sent"] == spy.pop(), (step, s)
            levels.append(s["level"])
            stats.append(s)
    assert levels == ["none"] * 5 + ["topk"] * 2, levels
    assert stats[0]["kept_ratio"] == 1.0 and 0.08 < stats[-1]["kept_ratio"] < 0.12
    buckets = stats[-1]["accordion_buckets"]
    assert buckets >= 2 and stats[-1]["accordion_heavy_buckets"] == buckets
    policy = state.policy
    assert [k for k, _ in policy.checks] == [2, 4, 6]
    layout = state.norms.last_layout
    mine = torch.tensor([math.sqrt(sum(float(sums[k].double().square().sum()) for k in layout[i]))
                         for i in sorted(layout)], dtype=torch.float64)
    dist.all_reduce(mine)
    torch.testing.assert_close(torch.tensor(policy.norms, dtype=torch.float64), mine / world,
                               rtol=1e-5, atol=0)
    _same_on_every_rank(levels, world)
    if rank == 0:
        print(f"accordion levels: {levels}; norms {policy.norms}")


SCENARIOS = {"stellatrain": _stellatrain, "accordion": _accordion}


def _worker(rank: int, world: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for scenario in SCENARIOS.values():
            scenario(rank, world)
            dist.barrier()
    finally:
        lifecycle.destroy_group()


def test_peers_run_through_the_hook_on_two_ranks() -> None:
    mp.spawn(_worker, args=(2, free_port()), nprocs=2, join=True)
