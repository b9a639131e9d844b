# my_job.py -- run with: torchrun --standalone --nproc-per-node 2 my_job.py
#   or on an emulated network, once per method: netsense run examples/my_job.yaml
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from netsenseml import hooks

with hooks.clean_exit():  # leaves the process without gloo's exit race (see below)
    dist.init_process_group("gloo")  # or "nccl"; torchrun (or netsense run) sets the env:// variables
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model = DDP(net)
    state = hooks.register(model)  # the run's method under netsense run, else allreduce; or name one
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    w = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))  # the task: argmax(x @ w)
    x_test = torch.randn(512, 64, generator=torch.Generator().manual_seed(2))
    for step in range(30):
        x = torch.randn(32, 64)
        loss = torch.nn.functional.cross_entropy(model(x), (x @ w).argmax(1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        hooks.report(samples=len(x), loss=loss.item())  # what only the job knows
        stats = state.pop_step_stats()  # bytes_sent, comm_s, kept_ratio, level, ratio, ...
        if step % 10 == 0:
            with torch.no_grad():
                acc = (net(x_test).argmax(1) == (x_test @ w).argmax(1)).float().mean().item()
            hooks.report(accuracy=acc)  # held-out accuracy: time to accuracy under the testbed
            if dist.get_rank() == 0:
                print(f"step {step}: level {stats['level']}, {stats['bytes_sent']} bytes sent, "
                      f"accuracy {acc:.2f}")
