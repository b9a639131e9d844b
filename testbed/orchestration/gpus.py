"""Which device and backend the workers of one emulated run use, and which GPU each gets.

Decided in the orchestrator, before anything is built, from the scenario's
``workload.device``/``workload.backend`` and the GPUs this machine has, because the workers
cannot see each other: every emulated host is a separate "machine" for NCCL (per-host
``NCCL_HOSTID``, ``testbed.orchestration.workers.transport_env``), and NCCL refuses two
ranks on one GPU. So NCCL needs one distinct GPU per worker; gloo runs on CUDA tensors as
well and may share GPUs (or run on CPU). ``auto`` picks CUDA + NCCL only when every worker
can have a GPU of its own, else CPU + gloo. A scenario that asks for NCCL (or CUDA) that
this machine cannot give is refused in one line naming the alternative.

The GPUs are counted with ``nvidia-smi -L`` (no torch import, no CUDA context in the
orchestrator) and narrowed by ``CUDA_VISIBLE_DEVICES`` when it is set; each rank gets one
of them as its host's only visible GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


class GpuPlanError(ValueError):
    """The scenario needs GPUs this machine does not have; the message says what to do."""


@dataclass(frozen=True)
class GpuPlan:
    device: str  # "cpu" | "cuda"
    backend: str  # "gloo" | "nccl"
    per_rank: list[str] | None  # CUDA device id given to each rank (None on CPU)
    note: str = ""


def visible_gpus() -> list[str]:
    """CUDA device ids this process may use ([] without a GPU or without nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    ids = [str(i) for i, line in enumerate(ln for ln in out.splitlines()
                                           if line_is_gpu(ln))]
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return ids
    wanted = [m.strip() for m in mask.split(",") if m.strip()]
    if any(m.startswith("-") for m in wanted):  # "-1": CUDA hides every device after it
        wanted = wanted[: next(i for i, m in enumerate(wanted) if m.startswith("-"))]
    return [m for m in wanted if m in ids or not m.isdigit()]


def line_is_gpu(line: str) -> bool:
    return line.startswith("GPU ")


def plan(device: str, backend: str, world_size: int, gpus: list[str]) -> GpuPlan:
    """The plan for ``world_size`` workers given the visible ``gpus`` (module doc)."""
    n = len(gpus)
    alt = ("or use gloo, which also runs on CUDA tensors and may share GPUs "
           "(workload.backend: gloo, workload.device: cuda)")
    if backend == "nccl":
        if device == "cpu":
            raise GpuPlanError("workload.backend: nccl needs workload.device cuda (NCCL moves "
                               "GPU tensors only); allowed with cpu: gloo, auto")
        if n < world_size:
            raise GpuPlanError(f"workload.backend: nccl needs {world_size} distinct GPUs (one "
                               f"per worker), this machine has {n}; use fewer workers {alt}")
        return GpuPlan("cuda", "nccl", gpus[:world_size])
    if device == "cuda":
        if n == 0:
            raise GpuPlanError("workload.device: cuda, but this machine has no GPU "
                               "(nvidia-smi finds none); allowed here: cpu, auto")
        chosen = "nccl" if backend == "auto" and n >= world_size else "gloo"
        per_rank = [gpus[r % n] for r in range(world_size)]
        note = "" if chosen == "nccl" or backend == "gloo" else (
            f"backend auto -> gloo: {world_size} workers share {n} GPU(s)")
        return GpuPlan("cuda", chosen, per_rank, note)
    if device == "auto" and backend == "auto" and n >= world_size > 0:
        return GpuPlan("cuda", "nccl", gpus[:world_size])
    note = (f"device auto -> cpu: {world_size} workers, {n} GPU(s)"
            if device == "auto" and n else "")
    return GpuPlan("cpu", "gloo", None, note)
