"""Payload mode's codecs (``netsenseml.payload``): each built-in compressor's declared wire
sizes are what its ``compress`` really returns, and what payload mode cannot stand in for
is refused in one line."""

from __future__ import annotations

import pytest
import torch

from netsenseml import compress, methods
from netsenseml.payload import PayloadCodec, PayloadError, PowerSGDPayload, check_compressor

NUMELS = [1, 7, 1000, 65_537, 300_001]
COMPRESSORS = [i.name if i.arg is None else f"{i.name}:0.01" for i in methods.infos()
               if i.kind == "compressor"]


@pytest.mark.parametrize("spec", COMPRESSORS)
@pytest.mark.parametrize("numel", NUMELS)
def test_wire_sizes_are_the_compressors_real_output(spec: str, numel: int) -> None:
    codec = methods.resolve(methods.parse(spec)).build()
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel))
    seed = 1234
    payload = codec.compress(x, seed=seed)
    wire, kept = codec.wire(numel, x.dtype, seed)
    real = tuple((t.numel(), t.dtype) for t in payload.tensors)
    if spec.startswith("dgc"):  # a sampled threshold keeps at most k; the wire pads to k
        assert [dt for _, dt in real] == [dt for _, dt in wire]
        assert all(n <= w for (n, _), (w, _) in zip(real, wire, strict=True))
        assert payload.nbytes <= codec.max_nbytes(numel) == sum(
            n * torch.empty((), dtype=dt).element_size() for n, dt in wire)
    else:
        assert real == wire and payload.kept == kept


@pytest.mark.parametrize("spec", COMPRESSORS)
def test_payload_codec_sends_zeros_of_those_sizes_and_decodes_nothing(spec: str) -> None:
    inner = methods.resolve(methods.parse(spec)).build()
    codec = PayloadCodec(inner)
    x = torch.randn(5000)
    p = codec.compress(x, seed=3)
    assert [(t.numel(), t.dtype) for t in p.tensors] == list(inner.wire(5000, x.dtype, 3)[0])
    assert all(not t.any() for t in p.tensors)
    out = torch.ones(5000)
    codec.accumulate(p, out)
    assert torch.equal(out, torch.ones(5000))  # nothing decoded
    assert codec.compress(x, seed=3).tensors[0] is p.tensors[0]  # reused, not allocated
    assert (codec.reduction, codec.name, codec.lossy) == (inner.reduction, inner.name, False)


def test_payload_codec_forwards_the_adaptive_ratio() -> None:
    codec = PayloadCodec(compress.TopKCompressor(0.1))
    codec.ratio = 0.005
    assert codec.inner.ratio == 0.005
    assert codec.compress(torch.zeros(10_000)).kept == 50


class _NoSizes:
    name, lossy, reduction = "mine", True, "allgather"

    def compress(self, tensor, seed=None): ...
    def decompress(self, payload): ...
    def accumulate(self, payload, out): ...


class _Bounded(_NoSizes):
    def max_nbytes(self, numel: int) -> int:
        return numel // 2 + 3


def test_a_plugin_without_sizes_is_refused_in_one_line() -> None:
    with pytest.raises(PayloadError) as exc:
        check_compressor(_NoSizes(), "my.mod:Mine")
    assert "my.mod:Mine" in str(exc.value) and "\n" not in str(exc.value)
    check_compressor(_Bounded(), "my.mod:Bounded")
    p = PayloadCodec(_Bounded()).compress(torch.zeros(101))
    assert p.nbytes == 101 // 2 + 3


def test_powersgd_sizes_follow_torchs_should_compress() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    state = PowerSGDPayload(None, 4)
    shapes = [torch.Size(s) for s in [(64, 3, 7, 7), (64,), (100, 512), (3, 3), (1000,), (5, 2)]]
    unc = ps = qs = 0
    for s in shapes:
        m = torch.zeros(s).view(s[0], -1)
        n, k = m.shape
        r = min(n, k, 4)
        ok, _, _ = _should_compress(n, k, r, 2)
        if ok:
            ps, qs = ps + n * r, qs + k * r
        else:
            unc += m.numel()
    assert state.sizes(shapes) == (unc, ps, qs)
