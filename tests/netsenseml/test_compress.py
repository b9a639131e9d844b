"""netsenseml compressors, error-feedback memory and payload packing (single process)."""

import pytest
import torch

from netsenseml import compress, hooks, methods
from netsenseml.comm import pack, unpack
from netsenseml.memory import MomentumCorrectionMemory, ResidualMemory

torch.set_num_threads(1)

SPECS = ["none", "fp16", "bf16", "int8", "topk:0.1", "randomk:0.1", "dgc:0.1"]


def expected_nbytes(spec: str, n: int, kept: int) -> int:
    return {
        "none": 4 * n,
        "fp16": 2 * n,
        "bf16": 2 * n,
        "int8": n + 4,
        "topk:0.1": 8 * kept,
        "randomk:0.1": 4 * kept,
        "dgc:0.1": 8 * kept,
    }[spec]


@pytest.mark.parametrize("spec", SPECS)
def test_compress_roundtrip_shape_dtype_and_wire_bytes(spec):
    torch.manual_seed(0)
    x = torch.randn(64, 300)
    c = compress.get(spec)
    p = c.compress(x)
    y = c.decompress(p)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert p.nbytes == sum(t.numel() * t.element_size() for t in p.tensors)
    assert p.nbytes == expected_nbytes(spec, x.numel(), p.kept)
    rel = float((y - x).norm() / x.norm())
    bound = {"none": 0, "fp16": 1e-3, "bf16": 1e-2, "int8": 0.02}.get(spec, 1.0)
    assert rel <= bound
    if spec in ("topk:0.1", "randomk:0.1"):
        assert p.kept == round(0.1 * x.numel()) or spec == "randomk:0.1"
        kept_positions = y != 0
        assert torch.equal(y[kept_positions], x[kept_positions])  # sparsifiers send exact values


def test_compress_exact_topk_selects_largest_magnitudes():
    torch.manual_seed(1)
    x = torch.randn(10_000)
    p = compress.get("topk:0.01").compress(x)
    want = set(torch.topk(x.abs(), 100).indices.tolist())
    assert set(p.tensors[1].tolist()) == want
    assert p.tensors[1].dtype == torch.int32


@pytest.mark.parametrize("dist", ["normal", "heavy"])
def test_compress_sampled_topk_keeps_l2_mass(dist):
    torch.manual_seed(2)
    x = torch.randn(1_000_000)
    if dist == "heavy":
        x = x * torch.rand(1_000_000).pow(4) * 10
    exact = compress.get("topk:0.01")
    fast = compress.get("dgc:0.01")
    pe, pf = exact.compress(x), fast.compress(x)
    assert pf.kept <= pe.kept  # never more than k
    mass_e = float(pe.tensors[0].pow(2).sum())
    mass_f = float(pf.tensors[0].pow(2).sum())
    assert mass_f >= 0.9 * mass_e


def test_compress_randomk_shared_seed():
    x = torch.randn(5000)
    a = compress.RandomKCompressor(0.05, seed=7)
    b = compress.RandomKCompressor(0.05, seed=7)
    pa, pb = a.compress(x), b.compress(x * 2)
    assert torch.equal(pa.meta["indices"], pb.meta["indices"])  # ranks line up
    pc = a.compress(x, seed=123)
    assert not torch.equal(pa.meta["indices"], pc.meta["indices"])
    assert pa.nbytes == 4 * pa.kept  # only the values go on the wire


@pytest.mark.parametrize(
    "spec", ["topk:1.5", "topk:abc", "topk:0", "topk", "foo", "int8:3", "dgc:-1", "randomk:nan"]
)
def test_compress_malformed_spec_names_spec_and_forms(spec):
    with pytest.raises(ValueError) as err:
        compress.get(spec)
    msg = str(err.value)
    assert repr(spec) in msg and compress.SPEC_FORMS in msg and "\n" not in msg


@pytest.mark.parametrize(
    "spec", ["foo", "topk:1.5", "topk:abc", "powersgd:0", "powersgd:x", "powersgd", "allreduce:2"]
)
def test_compress_parse_method_rejects_with_accepted_forms(spec):
    with pytest.raises(ValueError) as err:
        methods.parse(spec)
    assert repr(spec) in str(err.value) and hooks.METHOD_FORMS in str(err.value)


def test_compress_parse_method_accepts_table():
    assert methods.parse("topk:0.01").ratio == 0.01
    assert methods.parse("powersgd:4").rank == 4
    for m in ("allreduce", "fp16", "bf16", "int8", "netsenseml", "randomk:0.5", "dgc:1"):
        assert methods.parse(m).text == m


def test_compress_error_feedback_invariant_single_process():
    """sum of what was sent + residual == sum of the true gradients, step after step."""
    torch.manual_seed(3)
    c, mem = compress.get("topk:0.05"), ResidualMemory()
    sent_sum, true_sum = torch.zeros(2000), torch.zeros(2000)
    for _ in range(20):
        g = torch.randn(2000)
        comp = mem.compensate(0, g)
        sent = c.decompress(c.compress(comp))
        mem.update(0, comp, sent)
        sent_sum += sent
        true_sum += g
        torch.testing.assert_close(sent_sum + mem.residuals[0], true_sum, rtol=0, atol=1e-4)


def test_compress_momentum_correction_masks_sent_positions():
    mem = MomentumCorrectionMemory(0.9)
    g = torch.tensor([1.0, 0.1, 0.2])
    comp = mem.compensate("b", g)
    sent = torch.tensor([1.0, 0.0, 0.0])
    mem.update("b", comp, sent)
    assert mem.velocities["b"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    comp2 = mem.compensate("b", g)  # u = 0.9 u + g; c = e + u
    assert comp2.tolist() == pytest.approx([1.0, 0.1 + 0.19, 0.2 + 0.38])


def test_compress_pack_unpack_roundtrip():
    vals = torch.randn(7)
    idx = torch.arange(7, dtype=torch.int32) * 3
    extras = torch.tensor([1.5, -2.0, 3.25])
    buf = pack([vals, idx], extras)
    assert buf.dtype == torch.uint8 and buf.numel() == 16 + 12 + 7 * 8
    (v2, i2), e2 = unpack(buf, [torch.float32, torch.int32], 3)
    assert torch.equal(v2, vals) and torch.equal(i2, idx) and torch.equal(e2, extras)
