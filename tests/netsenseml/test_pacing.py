"""The emulated accelerator's pacing (``netsenseml.accelerator.Pacer``) on the real clock,
alone and inside DDP's hooks with real gloo process groups on loopback.

What must hold: a step whose real work is quick still takes the profiled time; a part whose
real work is slower than its slot is counted as an overrun (and only then); a bucket is not
handed to its collective before its profiled ready time; the codec's profiled cost delays
the buckets after it; under time dilation the profile holds on the virtual clock, and the
real time is k times longer.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import accelerator, clock, hooks, lifecycle
from netsenseml.compress.cast import NoCompression
from testbed.common.ports import free_port

# serial: the pacer's steps are held to their profiled times within milliseconds of the wall clock
pytestmark = pytest.mark.serial

#: A step a 2-core host does with room to spare: 30 ms forward, 60 ms backward, 10 ms optimizer.
TIMING = accelerator.Timing(0.03, 0.06, 0.01)


@pytest.fixture
def dilated():
    """Sets the clock's factor for one test and restores it (and its environment variable)."""
    before, env = clock.dilation(), os.environ.get("NETSENSE_DILATION")
    yield clock.set_dilation
    clock.set_dilation(before)
    if env is None:
        os.environ.pop("NETSENSE_DILATION", None)
    else:
        os.environ["NETSENSE_DILATION"] = env


def _step(pacer: accelerator.Pacer, work_s: float = 0.0, buckets: tuple[int, ...] = (100,)
          ) -> tuple[float, dict]:
    """One paced step whose forward really takes ``work_s``; (virtual duration, stats)."""
    t0 = clock.now()
    pacer.start_step()
    time.sleep(work_s)
    pacer.forward_done()
    for n in buckets:
        pacer.bucket(n)
    pacer.backward_done()
    pacer.optimizer_done()
    return clock.now() - t0, pacer.pop()


def test_a_quick_step_takes_the_profiled_time() -> None:
    pacer = accelerator.Pacer(TIMING, total_elements=100)
    took, stats = _step(pacer)
    assert TIMING.step_s <= took < TIMING.step_s + 0.03
    assert stats["pace_overrun"] == 0
    assert stats["pace_wait_s"] == pytest.approx(TIMING.step_s, abs=0.01)


def test_a_slow_part_is_an_overrun_and_says_which() -> None:
    pacer = accelerator.Pacer(TIMING, total_elements=100)
    took, stats = _step(pacer, work_s=TIMING.forward_s + 0.02)
    assert stats["pace_overrun"] == 1
    assert stats["pace_late_part"] == "optimizer and forward"
    assert stats["pace_late_s"] == pytest.approx(0.02, abs=0.008)
    _, quick = _step(pacer)  # the next step fits again: counted per step
    assert quick["pace_overrun"] == 0
    assert (pacer.steps, pacer.overruns) == (2, 1)


def test_a_slow_optimizer_is_absorbed_by_the_next_forward_when_it_fits() -> None:
    def slow_optimizer(pacer: accelerator.Pacer, over_s: float) -> None:
        pacer.start_step(follows=False)
        pacer.forward_done()
        pacer.bucket(100)
        pacer.backward_done()
        time.sleep(TIMING.optimizer_s + over_s)  # the host's optimizer, over its 10 ms slot
        pacer.optimizer_done()
        assert pacer.pop()["pace_overrun"] == 0  # judged with the next forward, not here

    pacer = accelerator.Pacer(TIMING, total_elements=100)
    t0 = clock.now()
    slow_optimizer(pacer, 0.02)
    pacer.start_step()  # straight on: the forward's 30 ms slot absorbs the 20 ms
    pacer.forward_done()
    assert clock.now() - t0 >= TIMING.step_s + TIMING.forward_s  # both slots held in full
    assert pacer.pop()["pace_overrun"] == 0
    slow_optimizer(pacer, 0.05)
    pacer.start_step()  # 50 ms over: more than the forward's slot holds
    pacer.forward_done()
    stats = pacer.pop()
    assert stats["pace_overrun"] == 1 and stats["pace_late_part"] == "optimizer and forward"
    slow_optimizer(pacer, 0.05)
    time.sleep(0.01)  # an evaluation came between: the next step starts its own slot
    pacer.start_step(follows=False)
    pacer.forward_done()
    assert pacer.pop()["pace_overrun"] == 0


def test_lateness_within_the_tolerance_is_no_overrun() -> None:
    pacer = accelerator.Pacer(TIMING, total_elements=100)
    _, stats = _step(pacer, work_s=TIMING.forward_s + 0.3 * pacer.tolerance)
    assert stats["pace_overrun"] == 0 and stats["pace_late_s"] > 0


def test_buckets_are_released_at_their_share_of_the_backward_pass() -> None:
    pacer = accelerator.Pacer(TIMING, total_elements=400)
    t0 = clock.now()
    pacer.start_step()
    pacer.forward_done()
    released = []
    for n in (100, 100, 200):  # shares 0.25, 0.5, 1.0
        pacer.bucket(n)
        released.append(clock.now() - t0)
    for at, share in zip(released, (0.25, 0.5, 1.0), strict=True):
        due = TIMING.forward_s + share * TIMING.backward_s
        assert due <= at < due + 0.02


def test_the_codec_cost_delays_the_buckets_after_it() -> None:
    timing = accelerator.Timing(0.01, 0.02, 0.0, {"topk": 0.01})  # 10 ms per MB
    pacer = accelerator.Pacer(timing, total_elements=2)
    t0 = clock.now()
    pacer.start_step()
    pacer.forward_done()
    pacer.bucket(1)
    started = clock.now()
    pacer.codec("topk", 2_000_000, started)  # 2 MB: 20 ms
    assert clock.now() - started >= 0.02
    pacer.bucket(1)
    assert clock.now() - t0 >= 0.01 + 0.02 + 0.02  # forward + backward + the codec before
    pacer.codec("none", 2_000_000, clock.now())  # a level without a cost is free
    assert pacer.pop()["pace_overrun"] == 0


def test_dilation_holds_the_profile_in_virtual_time(dilated) -> None:
    dilated(4.0)
    pacer = accelerator.Pacer(TIMING, total_elements=100)
    real0 = time.perf_counter()
    took, stats = _step(pacer)
    real = time.perf_counter() - real0
    assert TIMING.step_s <= took < TIMING.step_s + 0.0125
    assert 4 * TIMING.step_s <= real < 4 * TIMING.step_s + 0.05
    assert stats["pace_overrun"] == 0


# ------------------------------------------------------------------ inside DDP's hooks


class Stamped(NoCompression):
    """A plug-in compressor that stamps the virtual time each bucket reaches it: the hook
    compresses right after the pacer released the bucket."""

    name = "stamped"
    stamps: list[tuple[float, int]] = []

    def compress(self, tensor, seed=None):  # noqa: ANN001, ANN201 - the compressor protocol
        Stamped.stamps.append((clock.now(), tensor.numel()))
        return super().compress(tensor, seed)


def _ddp_worker(rank: int, world: int, port: int) -> None:
    for name in [n for n in os.environ if n.startswith("NETSENSE_")]:
        del os.environ[name]  # not an own job's rank, whatever an earlier test left set
    clock.set_dilation(1.0)
    # One compute thread per rank, as the emulation's workers run: two ranks' thread pools
    # on a 2-core host spin against each other and make a 1 ms forward take 20 ms.
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        # Two 1.2 MB layers: with DDP's 1 MB first bucket, two buckets of about half the
        # gradient each, so each has half the backward's slot.
        net = torch.nn.Sequential(torch.nn.Linear(20, 600), torch.nn.Tanh(),
                                  torch.nn.Linear(600, 500), torch.nn.Tanh(),
                                  torch.nn.Linear(500, 600), torch.nn.Tanh(),
                                  torch.nn.Linear(600, 4))
        model = DDP(net)
        numel = sum(p.numel() for p in net.parameters())
        pacer = accelerator.Pacer(TIMING, numel)
        state = hooks.register(model, "tests.netsenseml.test_pacing:Stamped", pacer=pacer)
        lates: list[float] = []
        for step in range(11):
            g = torch.Generator().manual_seed(1000 * step + rank)
            x, y = torch.randn(8, 20, generator=g), torch.randint(4, (8,), generator=g)
            Stamped.stamps.clear()
            t0 = clock.now()
            pacer.start_step(follows=False)  # each step's slots counted from t0
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if rank == 1 and step == 3:
                time.sleep(TIMING.forward_s + 0.03)  # this rank's device is slow once
            pacer.forward_done()
            loss.backward()
            pacer.backward_done()
            pacer.optimizer_done()
            took = clock.now() - t0
            stats = state.pop_step_stats()
            if step < 2:
                continue  # DDP builds its buckets in step 0 and rebuilds them in step 1
            assert len(Stamped.stamps) == 2, Stamped.stamps  # one stamp per bucket
            done = 0
            for at, n in Stamped.stamps:  # bucket i: forward + its share of the backward
                done += n
                due = TIMING.forward_s + TIMING.backward_s * done / numel
                assert at - t0 >= due - 1e-4, (rank, step, at - t0, due)
            assert took >= TIMING.step_s
            if rank == 1 and step == 3:
                assert stats["pace_overrun"] == 1, stats
                assert stats["pace_late_s"] >= 0.02  # (another part may be later still)
            else:
                lates.append(stats["pace_late_s"])
        # A shared host stalls both ranks now and then (10-40 ms here: another process, the
        # collector): those steps are overruns too, and counted; but the typical fast step
        # must be on time, or the pacer itself is late.
        lates.sort()
        assert lates[len(lates) // 2] <= pacer.tolerance, lates
        dist.barrier()
    finally:
        lifecycle.destroy_group()


def test_ddp_buckets_wait_for_their_profiled_time_and_a_slow_rank_is_counted() -> None:
    mp.start_processes(_ddp_worker, args=(2, free_port()), nprocs=2, join=True,
                       start_method="spawn")


def test_a_bucket_held_by_the_network_is_not_the_hosts_lateness() -> None:
    """A hook that sends bucket 1 only after bucket 0's collectives completed (PowerSGD
    under serialize_buckets) releases it late by the network's time: not an overrun."""
    from netsenseml import accelerator, clock

    timing = accelerator.Timing(forward_s=0.001, backward_s=0.002, optimizer_s=0.0)
    for not_before, late in ((None, True), ("now", False)):
        pacer = accelerator.Pacer(timing, 200)
        pacer.start_step(follows=False)
        pacer.forward_done()
        pacer.bucket(100)
        time.sleep(0.02)  # bucket 0's collective in flight: 10x the whole step
        pacer.bucket(100, not_before=clock.now() if not_before else None)
        assert bool(pacer.pop()["pace_overrun"]) is late
