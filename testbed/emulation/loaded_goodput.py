"""The faithful range measured on this machine (``netsense doctor --range``): one TCP flow's
goodput across a shaped dumbbell while compute processes load the cores as the workers do,
at the reference rate and at the stated limit (``testbed.config.faithful``: what the range
is, how it was measured and why a run above it measures the machine). Needs root: it
builds an emulated network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable

from testbed.config.faithful import FAITHFUL_MBIT, REFERENCE_MBIT, TOLERANCE
from testbed.emulation.emulated_network import Emulation

_LOAD = r"""
import sys, time, torch
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                        torch.nn.ReLU(), torch.nn.Linear(512, 300))
x = torch.randn(256, 256); y = torch.randint(0, 300, (256,))
stop = time.monotonic() + float(sys.argv[1])
while time.monotonic() < stop:
    m.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward()
"""


def compute_load(n: int, seconds: float) -> list[subprocess.Popen]:
    """``n`` processes training a width-512 MLP on one thread each, like the workers."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return [subprocess.Popen([sys.executable, "-c", _LOAD, f"{seconds:g}"],
                             stdout=subprocess.DEVNULL, env=env) for _ in range(n)]


def measure(rates: Iterable[float] = (REFERENCE_MBIT, FAITHFUL_MBIT), seconds: float = 2.0,
            workers: int = 2) -> list[tuple[float, float]]:
    """[(rate, loaded goodput / rate)] of one TCP flow across a shaped 1+1 dumbbell, with
    ``workers`` compute processes running. Needs root (it builds an emulation)."""
    out = []
    for rate in rates:
        emu = Emulation("dumbbell", {"n_left": 1, "n_right": 1, "n_cross": 0,
                                     "bottleneck_mbit": rate, "access_mbit": 10000.0})
        emu.start()
        procs: list[subprocess.Popen] = []
        try:
            procs = compute_load(workers, seconds + 4.0)
            time.sleep(1.5)  # past torch's import: computing
            src, dst = emu.worker_hosts[0], emu.worker_hosts[-1]
            out.append((rate, emu.iperf3_goodput(src, dst, seconds) / rate))
        finally:
            for p in procs:
                p.kill()
                p.wait()
            emu.stop()
    return out


def check(measured: list[tuple[float, float]]) -> tuple[bool, str]:
    """(every rate's efficiency within TOLERANCE of the first's, one line)."""
    ref = measured[0][1]
    parts, ok = [], True
    for rate, eff in measured:
        good = eff >= (1 - TOLERANCE) * ref
        ok &= good
        parts.append(f"{rate:g} Mbit/s: {eff * rate:.0f} ({eff / ref:.1%} of the reference)")
    return ok, "goodput with workers computing: " + "; ".join(parts)

