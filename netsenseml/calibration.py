"""The registration calibration of ``netsenseml``: each level's codec time, the latency and
the bandwidth, measured once before training on every rank and agreed as their mean, the
policy's :class:`~netsenseml.policy.Calibration` (its first decision comes from it;
``netsenseml.hooks``'s module docstring).

Named for what it returns, not "probe": in this library a probe is the policy's one-step
try of another level (``netsenseml.policy.Prober``, the paper's word), and the RTT probe is
the hooks' tiny collective for the monitor's min RTT (BBR's word).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from netsenseml import clock, compress
from netsenseml.policy import Calibration
from netsenseml.state import NetSenseState


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _codec_seconds(compressor: compress.Compressor, x: torch.Tensor, world: int) -> float:
    """Seconds to compress ``x``, update an error-feedback residual and decode ``world`` payloads."""
    out = torch.zeros_like(x)
    _sync(x.device)
    t0 = clock.now()
    payload = compressor.compress(x)
    if compressor.lossy:
        _ = x - compressor.decompress(payload).reshape(-1)
    for _ in range(world if compressor.reduction == "allgather" else 1):
        compressor.accumulate(payload, out)
    _sync(x.device)
    return clock.now() - t0


def _timed_allreduce(t: torch.Tensor, group: Any) -> float:
    _sync(t.device)
    t0 = clock.now()
    dist.all_reduce(t, group=group)
    _sync(t.device)
    return clock.now() - t0


def _timed_allgather(t: torch.Tensor, group: Any, world: int) -> float:
    outs = [torch.empty_like(t) for _ in range(world)]
    _sync(t.device)
    t0 = clock.now()
    dist.all_gather(outs, t, group=group)
    _sync(t.device)
    return clock.now() - t0


def _codec_times(state: NetSenseState, levels: tuple[str, ...], numel: int, device: torch.device,
                 ratio: float) -> list[float]:
    """Each level's codec seconds on a random gradient-sized tensor (top-k at
    ``ratio``), after a warm-up on a small slice; an emulated accelerator's profile
    instead of the host where there is one."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)
    topk = state.codecs.ladder["topk"]
    topk_ratio = topk.ratio  # type: ignore[attr-defined]
    topk.ratio = ratio  # type: ignore[attr-defined]
    codec = []
    for level in levels:
        if state.pacer is not None:  # an emulated accelerator: its codec, not the host's
            codec.append(state.pacer.timing.codec_s(level, 4 * numel))
            continue
        compressor = state.codecs.ladder[level]
        _codec_seconds(compressor, x[: min(numel, 4096)], state.world_size)  # warm-up
        codec.append(_codec_seconds(compressor, x, state.world_size))
    topk.ratio = topk_ratio  # type: ignore[attr-defined]
    return codec


def measure_calibration(
    state: NetSenseState,
    numel: int,
    device: torch.device,
    calibration_bytes: int = 1 << 20,
    calibration_ratio: float = 0.01,
    latency_repeats: int = 3,
    min_transfer_fraction: float = 0.1,
    bandwidth_repeats: int = 3,
) -> Calibration:
    """The registration calibration of ``netsenseml`` (module docstring) for a gradient of
    ``numel`` elements on ``device``; collective, run once.

    Codec times: each level of the ladder on a random tensor of the gradient's size (top-k
    at ``calibration_ratio``), decoding ``world`` payloads for the gathered levels, after a
    warm-up on a small slice. Latency: the fastest of ``latency_repeats`` one-element
    allreduces, and of as many one-byte all-gathers (the fixed cost of the gathered levels).
    Bandwidth: the fastest of ``bandwidth_repeats`` fp32 allreduces of ``min(gradient,
    calibration_bytes)`` bytes, each after a one-element allreduce that lines the ranks up; its
    time beyond the latency (at least ``min_transfer_fraction`` of it) per byte. All ranks
    then allreduce their values and use the mean, so they start from the same decision.

    Why 1 MiB and the fastest of three: the first decision and the fastest rate the policy
    has seen both come from this number, and a job that compresses from the first step
    sends no payload long enough to correct it. A transfer below a shaper's burst (HTB's is
    2 ms of the rate) leaves at the line's speed, and a rank descheduled on shared cores
    stretches one; a sample errs long far more often than short, so the fastest of a few is
    the estimate (as for the latency).
    """
    if numel <= 0:
        raise ValueError("netsenseml: the model has no parameter that requires a gradient")
    world, group = state.world_size, state.process_group
    assert state.policy is not None
    half = state.policy.half_level
    codec = _codec_times(state, (half, "int8", "topk"), numel, device, calibration_ratio)
    one = torch.zeros(1, device=device)
    latency = min(_timed_allreduce(one, group) for _ in range(latency_repeats))
    byte = torch.zeros(1, dtype=torch.uint8, device=device)  # top-k / int8 payloads are bytes
    gather_latency = min(_timed_allgather(byte, group, world) for _ in range(latency_repeats))
    n = max(1, min(numel, calibration_bytes // 4))
    big = torch.zeros(n, device=device)
    timings = []
    for _ in range(max(1, bandwidth_repeats)):
        dist.all_reduce(one, group=group)  # every rank has arrived: the next holds no skew
        timings.append(_timed_allreduce(big, group))
    seconds = min(timings)
    s_per_byte = max(seconds - latency, min_transfer_fraction * seconds) / (4 * n)
    agreed = torch.tensor([latency, s_per_byte * 1e9, *codec, gather_latency], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, group=group)
    latency, s_per_gbyte, c_half, c_int8, c_topk, gather_latency = (agreed / world).tolist()
    index_bytes = torch.empty((), dtype=compress.index_dtype(numel)).element_size()
    return Calibration(
        dense_bytes=4.0 * numel,
        world_size=world,
        latency_s=latency,
        s_per_byte=s_per_gbyte * 1e-9,
        codec_s={"none": 0.0, half: c_half, "int8": c_int8, "topk": c_topk},
        topk_bytes_per_element=4.0 + index_bytes,
        gather_latency_s=gather_latency,
    )
