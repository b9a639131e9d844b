"""A user's own DDP training script, as someone outside the project writes one (own argparse,
Dataset, DistributedSampler, AdamW), with the two lines that register the hook and report.

The tests run it under torchrun and under ``netsense run`` (a scenario whose workload is
this command); ``--fail`` makes it fail one way of netsenseml/job's failure classes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from netsenseml import hooks

FAILS = ("crash", "hang-before-init", "hang-after-init", "no-register", "child", "hang-late",
         "hang-collective", "hang-destroy")
#: How the script ends: inside hooks.clean_exit() (the default), as most scripts do with
#: dist.destroy_process_group(), by simply returning, or through hooks.shutdown().
ENDS = ("clean_exit", "destroy", "none", "shutdown")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--fail", choices=FAILS)
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--end", choices=ENDS, default="clean_exit")
    p.add_argument("--write", help="a relative path every rank writes (its working directory's)")
    args = p.parse_args()
    if args.write:  # the file a former run may have left: said, then written over
        print(f"rank {int(os.environ.get('RANK', '0'))}: found {args.write}: "
              f"{os.path.exists(args.write)}", flush=True)
        with open(args.write, "w") as fh:
            fh.write(f"rank {os.environ.get('RANK')} cwd {os.getcwd()}\n")
    rank = int(os.environ.get("RANK", "0"))
    if args.fail == "hang-before-init":
        time.sleep(3600)
    dist.init_process_group("gloo")
    if args.fail == "hang-after-init" and rank == 1:
        time.sleep(3600)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2048, 32, generator=g)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model = DDP(net)
    if args.fail != "no-register":
        state = hooks.register(model)  # the run's method under netsense run
        print(f"rank {rank}: method {state.method.text}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
            if not args.no_report:
                hooks.report(samples=len(xb), loss=loss.item())
            if step == args.steps // 2 and args.fail == "crash" and rank == 1:
                raise RuntimeError(f"the job's own bug at step {step}")
            if step == args.steps // 2 and args.fail == "hang-late" and rank == 1:
                time.sleep(3600)
            if step % 10 == 0 or step == args.steps:
                with torch.no_grad():
                    acc = (model(x[:512]).argmax(1) == y[:512]).float().mean().item()
                if not args.no_report:
                    hooks.report(accuracy=acc)
            if step >= args.steps:
                break
    if args.fail == "child":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    if args.fail in ("hang-collective", "hang-destroy"):
        # rank 0 in a collective that rank 1 never joins (rank 1 waits in its own code),
        # or rank 1 destroying the group with a collective pending that rank 0 never joins
        # (torch's destroy waits for it; rank 0 waits in its own code)
        if (rank == 0) == (args.fail == "hang-collective"):
            if args.fail == "hang-collective":
                dist.all_reduce(torch.ones(1))
            else:
                # nothing else holds the group (DDP does), so the destroy is where it ends
                del model, opt
                dist.all_reduce(torch.ones(1), async_op=True)
                dist.destroy_process_group()
        else:
            time.sleep(3600)
    print(f"rank {rank}: done {step} steps", flush=True)
    if args.end == "destroy":
        dist.destroy_process_group()
    elif args.end == "shutdown":
        hooks.shutdown()


if __name__ == "__main__":
    if "clean_exit" in sys.argv or "--end" not in sys.argv:
        with hooks.clean_exit():
            main()
    else:
        main()
