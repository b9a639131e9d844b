"""Plug-ins by import path, from files outside the package, over real gloo DDP on loopback.

Each test writes a user's module into a temporary folder, puts that folder on ``sys.path``
(and PYTHONPATH for the workers) and names what it holds as ``module:Name`` -- no edit to
``netsenseml``. Covered: a compressor class (scaled sign, error feedback from its declared
``lossy``), torch's own ``fp16_compress_hook`` and a user's hook that launches a second
collective from a completion callback, each counted by the process group, not by the hook.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
from tests.workloads.ranks import REPO, TINY, outputs, read_log, run_ranks

USER_MODULE = "nst_user_codecs"
USER_CODE = '''
"""A user's compressor and comm hook, in a file of their own."""
import torch
import torch.distributed as dist

from netsenseml.compress.base import Payload


class ScaledSign:
    """signSGD with a scale: one int8 sign per element and the mean magnitude (fp32)."""

    name = "scaledsign"
    lossy = True             # -> the library keeps an error-feedback residual
    reduction = "allgather"  # each rank's scale differs: decode every payload on its own

    def compress(self, tensor, seed=None):
        flat = tensor.reshape(-1)
        scale = flat.abs().mean().float().reshape(1)
        signs = torch.where(flat >= 0, 1, -1).to(torch.int8)
        return Payload((signs, scale), tensor.shape, tensor.dtype, kept=flat.numel())

    def decompress(self, payload):
        out = torch.zeros(payload.numel, dtype=payload.dtype)
        self.accumulate(payload, out)
        return out.view(payload.shape)

    def accumulate(self, payload, out):
        signs, scale = payload.tensors
        out.add_(signs.to(out.dtype) * scale.to(out.dtype))


def mean_and_norm_hook(group, bucket):
    """Averages the bucket, then (from the completion callback) all-reduces its squared norm."""
    buf = bucket.buffer()
    buf.div_(group.size())
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()

    def norm(f):
        mean = f.value()[0]
        sq = mean.pow(2).sum().reshape(1)
        dist.all_reduce(sq, group=group, async_op=True).get_future().wait()
        return mean

    return fut.then(norm)
'''
TORCH_FP16 = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks:fp16_compress_hook"


def _write_module(folder: Path) -> Path:
    (folder / f"{USER_MODULE}.py").write_text(USER_CODE)
    return folder


def _bucket_sizes() -> list[int]:
    """Elements per DDP bucket of ``two_bucket_model()`` as hooks see them after DDP's bucket rebuild."""
    sizes: list[int] = []

    def spy_hook(_state, bucket):
        sizes.append(bucket.buffer().numel())
        return default_hooks.allreduce_hook(None, bucket)

    probe = DDP(two_bucket_model())
    probe.register_comm_hook(None, spy_hook)
    for step in range(2):  # DDP rebuilds its buckets after the first step
        sizes.clear()
        backward(probe, dist.get_rank(), step)
    return sizes


# ------------------------------------------------------------------ scenarios (in the ranks)
def _sign_compressor_error_feedback(rank: int, world: int) -> None:
    from netsenseml import hooks

    ddp = DDP(two_bucket_model())
    plain = two_bucket_model()
    state = hooks.register(ddp, f"{USER_MODULE}:ScaledSign")
    assert state.memory is not None, "a lossy plug-in must get error feedback"
    buckets = _bucket_sizes()
    params = list(ddp.module.parameters())
    sent = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    true = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    with CollectiveSpy() as spy:
        for step in range(STEPS + 2):
            plain.load_state_dict(ddp.module.state_dict())
            backward(plain, rank, step)
            backward(ddp, rank, step)
            for i, (p, q) in enumerate(zip(params, plain.parameters(), strict=True)):
                sent[i] += world * p.grad.double()
                true[i] += q.grad.double()
            with torch.no_grad():
                for p in params:
                    p -= 0.1 * p.grad
            stats = state.pop_step_stats()
            handed = spy.pop()
            assert stats["bytes_sent"] == handed, (step, stats, handed)
            assert stats["level"] == "scaledsign" and stats["kept_ratio"] == 1.0
            if step >= 1:  # buckets rebuilt: per bucket a size exchange (8 B) + header + codes + scale
                assert handed == sum(8 + 16 + n + 4 for n in buckets), (handed, buckets)
    residual = state.residual_by_param()
    assert set(residual) == set(params)
    assert sum(float(r.abs().sum()) for r in residual.values()) > 0
    for i, p in enumerate(params):
        r = residual[p].double().clone()
        dist.all_reduce(r)
        dist.all_reduce(true[i])
        torch.testing.assert_close(sent[i] + r, true[i], rtol=0, atol=1e-5)


def _torch_fp16_hook_by_path(rank: int, world: int) -> None:
    from netsenseml import hooks

    ref, hooked = DDP(two_bucket_model()), DDP(two_bucket_model())
    ref.register_comm_hook(None, default_hooks.fp16_compress_hook)
    state = hooks.register(hooked, TORCH_FP16)
    buckets = _bucket_sizes()
    with CollectiveSpy() as spy:
        for step in range(STEPS):
            backward(ref, rank, step)
            spy.pop()  # the reference's own collectives are not the hook's
            backward(hooked, rank, step)
            for a, b in zip(grads(ref), grads(hooked), strict=True):
                assert torch.equal(a, b), "fp16_compress_hook by path differs from torch's"
            stats = state.pop_step_stats()
            handed = spy.pop()
            assert stats["bytes_sent"] == handed, (step, stats, handed)
            if step >= 1:
                assert handed == sum(2 * n for n in buckets), (handed, buckets)
                assert spy.calls["all_reduce"] > 0
            assert stats["level"] == "fp16_compress_hook" and stats["comm_s"] > 0
            assert abs(stats["kept_ratio"] - 0.5) < 1e-9  # bytes / fp32 bytes
            for m in (ref, hooked):
                with torch.no_grad():
                    for p in m.parameters():
                        p -= 0.1 * p.grad


def _user_hook_with_callback_collective(rank: int, world: int) -> None:
    from netsenseml import hooks

    ref, hooked = DDP(two_bucket_model()), DDP(two_bucket_model())
    state = hooks.register(hooked, f"{USER_MODULE}:mean_and_norm_hook")
    buckets = _bucket_sizes()
    with CollectiveSpy() as spy:
        for step in range(STEPS):
            backward(ref, rank, step)
            spy.pop()
            backward(hooked, rank, step)
            for a, b in zip(grads(ref), grads(hooked), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
            stats = state.pop_step_stats()
            handed = spy.pop()
            assert stats["bytes_sent"] == handed, (step, stats, handed)
            if step >= 1:  # the norm's 4 bytes are issued from the gloo callback thread
                assert handed == sum(4 * n + 4 for n in buckets), (handed, buckets)


SCENARIOS = {
    "sign": _sign_compressor_error_feedback,
    "fp16_hook": _torch_fp16_hook_by_path,
    "callback_hook": _user_hook_with_callback_collective,
}


def _worker(rank: int, world: int, port: int, folder: str, names: list[str]) -> None:
    sys.path.insert(0, folder)
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for name in names:
            SCENARIOS[name](rank, world)
            dist.barrier()
    finally:
        lifecycle.destroy_group()


def test_plugins_world2_compressor_and_raw_hooks(tmp_path: Path, monkeypatch) -> None:
    folder = _write_module(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    mp.spawn(_worker, args=(2, free_port(), str(folder), list(SCENARIOS)), nprocs=2, join=True)


def test_plugins_worker_trains_with_a_compressor_by_path(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "mods"
    folder.mkdir()
    _write_module(folder)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    codes = run_ranks(tmp_path, [*TINY["mlp"], "--method", f"{USER_MODULE}:ScaledSign",
                                 "--steps", "3", "--batch-size", "8", "--seed", "1"])
    assert codes == [0, 0], outputs(tmp_path)
    for rank in range(2):
        recs = read_log(tmp_path, rank)
        grad_bytes = recs[0]["grad_bytes"]
        steps = [r for r in recs if r["kind"] == "step"]
        assert len(steps) == 3 and all(r["level"] == "scaledsign" for r in steps)
        # int8 signs: a quarter of the fp32 gradient plus headers and scales
        assert all(grad_bytes / 4 <= r["bytes_sent"] < grad_bytes / 3 for r in steps), steps


def test_plugins_worker_refuses_unimportable_plugin_in_one_line(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "workloads.train", "--model", "mlp", "--dataset", "digits",
         "--method", "nst_no_such_module:Codec", "--steps", "1", "--batch-size", "8",
         "--seed", "0", "--log-dir", str(tmp_path / "logs")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, WORLD_SIZE="1", RANK="0"),
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "--method" in lines[0] and "nst_no_such_module" in lines[0] and "PYTHONPATH" in lines[0]
    assert not (tmp_path / "logs").exists()
