"""netsenseml DDP hooks with real gloo process groups on loopback (spawned processes).

One pytest test per world size runs every scenario in the same processes, to pay the
process start-up once. Workers assert; a failing assertion in any rank fails the test with
that rank's traceback. The serial tests' ranks are forked from the session's pre-imported
zygote (``zygote``, tests/conftest.py), as the testbed starts its workers: they start in
milliseconds, not seconds of torch imports per rank on the 2 cores; the one-process world
spawns its rank.
"""

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import lifecycle
from testbed.common.ports import free_port
from tests.netsenseml.ddp_harness import (
    STEPS,
    CollectiveSpy,
    backward,
    grads,
    two_bucket_model,
)

#: serial: two collectives' order in time is asserted ("recorder"), and world 4 puts 4 ranks on
#: the 2 cores; the one-process world and the refusals hold no clock and run in parallel
SERIAL = pytest.mark.serial


# ------------------------------------------------------------------ scenarios
def _assert_same_gradients(ref, hooked, rank, message):
    """Trains both models in lock-step (plain SGD) and requires bit-identical gradients."""
    for step in range(STEPS):
        backward(ref, rank, step)
        backward(hooked, rank, step)
        for a, b in zip(grads(ref), grads(hooked), strict=True):
            assert torch.equal(a, b), message
        for m in (ref, hooked):
            with torch.no_grad():
                for p in m.parameters():
                    p -= 0.1 * p.grad


def _allreduce_equals_no_hook(rank, world):
    from netsenseml import hooks

    ref, hooked = DDP(two_bucket_model()), DDP(two_bucket_model())
    hooks.register(hooked, "allreduce")
    _assert_same_gradients(ref, hooked, rank, "allreduce hook differs from DDP without a hook")


def _fp16_bit_identical_to_torch(rank, world):
    from netsenseml import hooks

    ref, hooked = DDP(two_bucket_model()), DDP(two_bucket_model())
    ref.register_comm_hook(None, default_hooks.fp16_compress_hook)
    hooks.register(hooked, "fp16")
    _assert_same_gradients(ref, hooked, rank, "fp16 hook differs from torch's fp16_compress_hook")


def _topk_error_feedback_invariant(rank, world):
    """sum over steps and ranks of what was sent + sum of residuals == sum of true grads."""
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    plain = two_bucket_model()
    state = hooks.register(ddp, "topk:0.05")
    params = list(ddp.module.parameters())
    sent = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    true = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    for step in range(STEPS + 2):
        plain.load_state_dict(ddp.module.state_dict())
        backward(plain, rank, step)  # this rank's true local gradient
        backward(ddp, rank, step)
        for i, (p, q) in enumerate(zip(params, plain.parameters(), strict=True)):
            sent[i] += world * p.grad.double()  # DDP's result is the mean of what was sent
            true[i] += q.grad.double()
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
        stats = state.pop_step_stats()
        assert 0.04 < stats["kept_ratio"] < 0.06 and stats["level"] == "topk"
    residual = state.residual_by_param()
    assert set(residual) == set(params), (len(residual), [tuple(p.shape) for p in residual])
    assert sum(float(r.abs().sum()) for r in residual.values()) > 0  # top-k left some behind
    for i, p in enumerate(params):
        r = residual[p].double().clone()
        dist.all_reduce(r)
        dist.all_reduce(true[i])
        torch.testing.assert_close(sent[i] + r, true[i], rtol=0, atol=1e-5)


def _bytes_counted_equal_bytes_handed(rank, world):
    from netsenseml import hooks

    methods = ["allreduce", "fp16", "bf16", "int8", "topk:0.05", "randomk:0.05", "dgc:0.05"]
    methods += ["powersgd:2", "netsenseml", "netsenseml-paper"]
    for method in methods:
        ddp = DDP(two_bucket_model())
        state = hooks.register(ddp, method)
        first = state.decision
        levels = []
        with CollectiveSpy() as spy:
            for step in range(STEPS + 2):
                backward(ddp, rank, step)
                stats = state.pop_step_stats()
                handed = spy.pop()
                assert stats["bytes_sent"] == handed, (method, step, stats, handed)
                assert stats["bytes_dense"] == 4 * sum(p.numel() for p in ddp.parameters())
                assert stats["comm_s"] > 0 and 0 < stats["kept_ratio"] <= 1
                levels.append((stats["level"], round(stats["ratio"], 6)))
        assert all(torch.isfinite(p.grad).all() for p in ddp.parameters())
        if method == "powersgd:2":
            ps = state.powersgd
            assert ps.iter >= STEPS and ps.p_memory_dict, "torch's PowerSGD did not run"
            assert stats["kept_ratio"] < 0.2 and stats["level"] == "powersgd"
            assert spy.calls["all_reduce"] >= 3 * (STEPS - 2)  # uncompressed, P, Q per bucket
        if method.startswith("netsenseml"):
            # The first step sends the decision taken at registration (netsenseml: from
            # the probe; netsenseml-paper: top-k at the prototype's 0.75).
            assert levels[0] == (first.level, round(first.ratio, 6)), (levels, first)
            if method == "netsenseml-paper":
                assert levels[0] == ("topk", 0.75), levels
            everyone = [None] * world
            dist.all_gather_object(everyone, levels)
            assert all(x == levels for x in everyone), "ranks took different decisions"


def _variable_k_gather_without_truncation(rank, world):
    from netsenseml import compress
    from netsenseml.comm import CommRecorder, allgather_bytes, pack, unpack

    def rank_tensor(r):
        return torch.randn(5000, generator=torch.Generator().manual_seed(r))

    def rank_compressor(r):
        return compress.TopKCompressor(0.01 * (r + 1))  # k differs per rank

    mine = rank_compressor(rank).compress(rank_tensor(rank))
    rec = CommRecorder()
    bufs = allgather_bytes(pack(mine.tensors, None), None, rec).wait()
    assert len(bufs) == world
    total = torch.zeros(5000)
    for r, b in enumerate(bufs):
        (vals, idx), _ = unpack(b, [torch.float32, torch.int32], 0)
        want = rank_compressor(r).compress(rank_tensor(r))
        assert vals.numel() == want.kept == round(0.01 * (r + 1) * 5000)
        assert torch.equal(vals, want.tensors[0]) and torch.equal(idx, want.tensors[1])
        total.index_add_(0, idx.long(), vals)
    # bytes: 8-byte size exchange + this rank's buffer padded to the largest one
    assert rec.bytes_sent == 8 + max(b.numel() for b in bufs)


def _kept_buffers_gather_each_ranks_bytes(rank, world):
    """Payload mode's kept all-gather buffers (comm.GatherBuffers): the same tensors step
    after step, each rank's bytes in its own buffer every time (a shorter payload after a
    longer one included: the receivers read the true lengths), the bytes counted as new."""
    from netsenseml.comm import CommRecorder, GatherBuffers, allgather_packed

    pool, rec = GatherBuffers(), CommRecorder()
    seen = []
    for step, n in enumerate((700, 300)):
        mine = torch.full((n,), float(10 * rank + step))
        packing, fut = allgather_packed([mine], None, None, rec, 4 * 800, (pool, 0))
        bufs = fut.wait()
        seen.append([b.data_ptr() for b in bufs])
        for r, b in enumerate(bufs):
            (vals,), _ = packing.unpack(b)
            assert torch.equal(vals, torch.full((n,), float(10 * r + step)))
    assert seen[0] == seen[1]  # the same receive buffers both steps
    assert rec.bytes_sent == 2 * packing.capacity(4 * 800)


def _paper_rule_runs_agreed_and_averages(rank, world):
    """netsenseml-paper: identical decisions on all ranks, the rule moves the fraction, and
    the result is (sum of what the ranks sent) / world -- not the prototype's
    (decompressed sum + local gradient) / 2. With error feedback, per step:
    world x result + sum of the residuals' growth == sum of the true local gradients."""
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    plain = two_bucket_model()
    state = hooks.register(ddp, "netsenseml-paper")
    params = list(ddp.module.parameters())
    decisions = []
    prev_residual = [torch.zeros_like(p) for p in params]
    for step in range(STEPS + 2):
        plain.load_state_dict(ddp.module.state_dict())
        backward(plain, rank, step)
        backward(ddp, rank, step)
        residual = state.residual_by_param()
        for i, (p, q) in enumerate(zip(params, plain.parameters(), strict=True)):
            r = residual[p] if p in residual else torch.zeros_like(p)
            growth = (r - prev_residual[i]).double()
            true = q.grad.double().clone()
            dist.all_reduce(growth)
            dist.all_reduce(true)
            torch.testing.assert_close(world * p.grad.double() + growth, true, rtol=0, atol=1e-5)
            prev_residual[i] = r.clone()
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
        stats = state.pop_step_stats()
        decisions.append((stats["level"], round(stats["ratio"], 9)))
    assert decisions[0] == ("topk", 0.75) and len(set(decisions)) > 1, decisions
    everyone = [None] * world
    dist.all_gather_object(everyone, decisions)
    assert all(x == decisions for x in everyone), "ranks took different decisions"


def _netsenseml_default_runs(rank, world):
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    state = hooks.register(ddp, "netsenseml")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(STEPS):
        backward(ddp, rank, step)
        opt.step()
        stats = state.pop_step_stats()
        assert stats["level"] in ("none", "fp16", "int8", "topk")
    assert all(torch.isfinite(p).all() for p in ddp.parameters())
    # the registration calibration's options, and their names before issue 51 (the probe's)
    for options in ({"calibration_bytes": 4096, "calibration_ratio": 0.1},
                    {"probe_bytes": 4096, "probe_ratio": 0.1}):
        assert hooks.register(DDP(two_bucket_model()), "netsenseml", **options).calibration


def _convergence_table_loaded_and_used(rank, world):
    """A table that makes every compression cost 10x the steps keeps netsenseml at none;
    the policy's factors are the table's."""
    from netsenseml import hooks
    from netsenseml.policy import Decision

    costly = {"none": 100, "fp16": 1000, "int8": 1000, "topk:0.1": 1000, "topk:0.001": 2000}
    ddp = DDP(two_bucket_model())
    state = hooks.register(ddp, "netsenseml", convergence=costly)
    assert state.policy.prior.factor("topk", 0.1) == 10.0
    assert state.policy.steps_factor(Decision("topk", 0.01)) == pytest.approx(15.0)
    for step in range(STEPS):
        backward(ddp, rank, step)
        assert state.pop_step_stats()["level"] == "none"
    with pytest.raises(ValueError, match="convergence.*'none'"):
        hooks.register(DDP(two_bucket_model()), "netsenseml", convergence={"fp16": 100})


def _switch_drains_the_residual(rank, world):
    """After 100 top-k 0.005 steps, a switch to fp16 does not dump the residual: the first
    fp16 update is at most 2x the true mean gradient's norm (the drain's bound), and the
    residual then shrinks step by step to fp16's own rounding. The policy is held at the
    levels given (its decisions replaced); the hook and its memory are the real ones."""
    from netsenseml import hooks
    from netsenseml.policy import Decision

    torch.manual_seed(0)
    ddp = DDP(two_bucket_model())
    plain = two_bucket_model()
    state = hooks.register(ddp, "netsenseml")
    state.policy.observe = lambda obs: None  # hold what the test sets
    params = list(ddp.module.parameters())

    def step(k, decision):
        state.decision = decision
        plain.load_state_dict(ddp.module.state_dict())
        backward(plain, rank, k)
        backward(ddp, rank, k)
        true = torch.cat([q.grad.reshape(-1) for q in plain.parameters()])
        dist.all_reduce(true)
        true /= world
        sent = torch.cat([p.grad.reshape(-1) for p in params])
        res = torch.cat([r.reshape(-1) for r in state.residual_by_param().values()] or [torch.zeros(1)])
        return float(sent.norm()), float(true.norm()), float(res.norm())

    for k in range(100):
        step(k, Decision("topk", 0.005))
    sent, true, res0 = step(100, Decision("fp16"))
    assert res0 > 0 and sent <= 2.0 * true * 1.001, (sent, true)
    norms = [step(101 + k, Decision("fp16"))[2] for k in range(40)]
    assert norms[0] < res0 and norms[-1] < 1e-3 * res0, (res0, norms[:5], norms[-3:])
    if rank == 0:
        print(f"switch test: first fp16 update {sent:.4g} = {sent / true:.2f} x the mean gradient "
              f"{true:.4g}; residual {res0:.4g} -> {norms[-1]:.3g} in 40 steps")


def _recorder_one_sample_for_concurrent_payloads(rank, world):
    """gloo runs a group's collectives concurrently (two threads per group): a small
    allreduce launched after a large one completes first, so per-collective times would
    make the second look free. The recorder makes both one monitor sample."""
    import time

    from netsenseml.comm import CommRecorder, allreduce

    class Sink:
        def __init__(self):
            self.samples = []

        def add(self, nbytes, seconds, t=None, rate_ok=True):
            self.samples.append((nbytes, seconds))

    sink = Sink()
    rec = CommRecorder(sink)
    big, small = torch.ones(12_500_000), torch.ones(1000)  # 50 MB, 4 kB
    done = {}
    t0 = time.perf_counter()
    f_big = allreduce(big, None, rec).then(lambda f: done.setdefault("big", time.perf_counter()))
    f_small = allreduce(small, None, rec).then(lambda f: done.setdefault("small", time.perf_counter()))
    f_big.wait()
    f_small.wait()
    elapsed = max(done.values()) - t0
    assert done["small"] < done["big"], f"gloo ran the collectives one after the other: {done}"
    assert len(sink.samples) == 1, sink.samples
    nbytes, seconds = sink.samples[0]
    assert nbytes == 4 * (12_500_000 + 1000)
    assert 0 < seconds <= elapsed + 1e-3
    assert torch.all(small == world) and torch.all(big[:10] == world)


SCENARIOS = {
    "allreduce": _allreduce_equals_no_hook,
    "fp16": _fp16_bit_identical_to_torch,
    "ef": _topk_error_feedback_invariant,
    "bytes": _bytes_counted_equal_bytes_handed,
    "variable_k": _variable_k_gather_without_truncation,
    "kept_buffers": _kept_buffers_gather_each_ranks_bytes,
    "netsenseml": _netsenseml_default_runs,
    "paper": _paper_rule_runs_agreed_and_averages,
    "convergence": _convergence_table_loaded_and_used,
    "switch": _switch_drains_the_residual,
    "recorder": _recorder_one_sample_for_concurrent_payloads,
}


def _worker(rank: int, world: int, port: int, names: list[str]) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for name in names:
            SCENARIOS[name](rank, world)
            dist.barrier()
    finally:
        lifecycle.destroy_group()


def _run(world: int, names: list[str]) -> None:
    mp.spawn(_worker, args=(world, free_port(), names), nprocs=world, join=True)


REPO = Path(__file__).resolve().parents[2]
#: what each forked rank runs (an own job's ``python -c``, workloads.job_runner)
RANK_CODE = ("import sys; from tests.netsenseml.test_hooks_distributed import _worker; "
             "_worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(','))")


def _run_forked(zygote, tmp: Path, world: int, names: list[str], timeout: float = 120) -> None:
    """``_run`` with the ranks forked from ``zygote``; a rank that fails fails the test with
    its log (its traceback), and ranks still running at ``timeout`` are killed by PID."""
    port, env = free_port(), dict(os.environ, PYTHONPATH=str(REPO))
    ranks = [zygote.spawn(["-c", RANK_CODE, str(rank), str(world), str(port), ",".join(names)],
                          env=env, cwd=str(REPO), log=tmp / f"rank{rank}.log", netns_pid=None,
                          job=True) for rank in range(world)]
    codes: list[int | None] = []
    try:
        for w in ranks:
            try:
                codes.append(w.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        for w in ranks:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGKILL)
                w.wait(timeout=30)
    logs = "\n".join(f"--- rank {r} (exit {c}) ---\n" + (tmp / f"rank{r}.log").read_text()[-3000:]
                     for r, c in enumerate(codes))
    assert codes == [0] * world, logs


@SERIAL
def test_hooks_world2_all_scenarios(zygote, tmp_path):
    _run_forked(zygote, tmp_path, 2, list(SCENARIOS))


@SERIAL
@pytest.mark.slow  # 4 ranks on the 2 cores; world 2 runs every scenario in make test
def test_hooks_world4_core_scenarios(zygote, tmp_path):
    _run_forked(zygote, tmp_path, 4, ["allreduce", "fp16", "ef", "bytes", "variable_k"])


def test_hooks_world1_single_process_ddp():
    _run(1, ["allreduce", "fp16", "bytes", "netsenseml", "paper"])


@pytest.mark.parametrize("bad", ["topk:2", "quantum"])
def test_hooks_register_rejects_bad_method_before_touching_model(bad):
    with pytest.raises(ValueError, match="accepted"):
        from netsenseml import hooks

        hooks.register(object(), bad)  # type: ignore[arg-type]
