"""What NetSenseML's step loop costs beyond the level it sends, on loopback.

A fixed level (``fp16``, ``int8``, ``topk:0.01``) against ``netsenseml`` pinned to that
same level (``levels=(level,)``, top-k's grid collapsed onto the ratio): the two send the
same bytes, so any step time between them is the adaptive method's own cost -- the tiny
RTT collectives, the piggy-backed observation, the policy's fits and decision, error
feedback on cast levels, the monitor. That cost is paid on every step, so on a fast link
it decides whether adapting can ever beat the best fixed level.

``--world`` ranks (gloo, 127.0.0.1, one torch thread each; default 2, the crossover's
4-worker experiments put 4 on the 2 cores), the crossover workload (MLP width 512 on
``mixture``, batch 256 per rank), ``--levels`` a subset of the pairs, ``--steps`` timed steps after 20 warm-up steps,
methods interleaved ``--rounds`` times so drift in the machine's load hits both alike.
Prints per method the median step, compute (forward+backward+hook, as the worker reports
it) and codec times, and the pinned method's extra over the fixed one. Run under the heavy
lock (it uses both cores):

    flock /tmp/netsense-heavy.lock .venv/bin/python benchmarks/hook_overhead.py [--steps 150] [--world 4 --levels fp16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import hooks, lifecycle
from testbed.common.ports import free_port
from workloads import registry
from workloads.datasets import load_dataset
from workloads.models import build_model
from workloads.train import _loss_and_correct, make_optimizer

PAIRS = [("fp16", {"levels": ("fp16",)}),
         ("int8", {"levels": ("int8",)}),
         ("topk:0.01", {"levels": ("topk",), "max_ratio": 0.01, "floor": 0.01})]


def _worker(rank: int, port: int, method: str, options: dict, steps: int, world: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    data = load_dataset("mixture")
    torch.manual_seed(0)
    model = build_model("mlp", input_shape=data.input_shape, num_classes=data.num_classes,
                        width=512)
    entry = registry.model_entry("mlp")
    ddp = DDP(model)
    state = hooks.register(ddp, method, **options)
    opt = make_optimizer(ddp, entry, entry.lr, entry.momentum)
    sampler = torch.utils.data.distributed.DistributedSampler(data.train, world, rank, seed=0)
    loader = torch.utils.data.DataLoader(data.train, batch_size=256, sampler=sampler,
                                         drop_last=True)
    step_s, codec_s = [], []
    it = iter(loader)
    for i in range(steps + 20):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, _, _ = _loss_and_correct(ddp, x, y, data.kind)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        stats = state.pop_step_stats()
        if i >= 20:
            step_s.append(t1 - t0)
            codec_s.append(float(stats.get("codec_s", 0.0)))
    lifecycle.destroy_group()
    if rank == 0:
        out[method + (" (pinned)" if options else "")] = (step_s, codec_s)


def run_one(method: str, options: dict, steps: int, world: int) -> tuple[list[float], list[float]]:
    with mp.Manager() as m:
        out = m.dict()
        mp.spawn(_worker, args=(free_port(), method, options, steps, world, out), nprocs=world)
        return next(iter(out.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--world", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--levels", nargs="+", default=[lv for lv, _ in PAIRS],
                    choices=[lv for lv, _ in PAIRS], help="the pairs to time (default all)")
    args = ap.parse_args()
    pairs = [(lv, pin) for lv, pin in PAIRS if lv in args.levels]
    acc: dict[str, list[list[float]]] = {}
    for _ in range(args.rounds):
        for level, pin in pairs:
            for method, options in ((level, {}), ("netsenseml", pin)):
                step, codec = run_one(method, options, args.steps, args.world)
                key = f"{level} {'pinned netsenseml' if options else 'fixed'}"
                a = acc.setdefault(key, [[], []])
                a[0] += step
                a[1] += codec
    print(f"{'method':<28} {'step ms':>8} {'codec ms':>9} {'extra ms':>9} {'extra %':>8}")
    for level, _ in pairs:
        fixed = statistics.median(acc[f"{level} fixed"][0]) * 1e3
        for kind in ("fixed", "pinned netsenseml"):
            step, codec = acc[f"{level} {kind}"]
            med = statistics.median(step) * 1e3
            extra = med - fixed
            print(f"{level + ' ' + kind:<28} {med:8.2f} {statistics.median(codec) * 1e3:9.2f} "
                  f"{extra:9.2f} {100 * extra / fixed:8.1f}")


if __name__ == "__main__":
    main()
