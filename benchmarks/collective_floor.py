"""The floor of a tiny collective against the kernel's RTT of the sockets it travels on.

    .venv/bin/python benchmarks/collective_floor.py [--world 2] [--iters 500] [--port 29612]

NetSenseML's monitor takes its min RTT from tiny (4-byte) collectives through the recorder
(``netsenseml.monitor``). What such a collective takes at the least is gloo's own software
time (the calling thread handing the op to gloo's worker, the ring's rounds, the wake-up)
plus the path's round trips; the kernel's ``tcpi_min_rtt`` of the same sockets is the path
alone. On a path with propagation delay (a WAN, or ``sch_netem``) the path dominates and
the two agree within a small factor; on veth pairs or loopback without delay the software
floor is all there is. This prints both, on loopback, with blocking ``all_reduce`` calls
(no hook, no recorder: the least any gloo collective takes here) and the kernel's view read
from the rank's own peer sockets with the monitor's :class:`netsenseml.monitor.TcpInfoSensor`.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from netsenseml.monitor import TcpInfoSensor


def _rank(rank: int, world: int, iters: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.zeros(1)
    for _ in range(50):  # connections up, caches warm
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - start)
    view = TcpInfoSensor(exclude_port=port).read()
    dist.barrier()
    dist.destroy_process_group()
    times.sort()
    out[rank] = (times[0], times[len(times) // 2], view.min_rtt_s if view else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--port", type=int, default=29612)
    a = ap.parse_args()
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(a.world, a.iters, a.port, out), nprocs=a.world)
        rows = dict(out)
    print(f"4-byte gloo all_reduce, {a.world} ranks on loopback, {a.iters} calls each:")
    for rank in sorted(rows):
        fastest, median, kernel = rows[rank]
        ratio = f"{fastest / kernel:.0f}x" if kernel else "-"
        kernel_txt = f"{kernel * 1e6:.0f} us" if kernel else "not readable"
        print(f"  rank {rank}: collective min {fastest * 1e6:.0f} us, median {median * 1e6:.0f} us; "
              f"kernel tcpi_min_rtt {kernel_txt}; collective min / kernel {ratio}")


if __name__ == "__main__":
    main()
