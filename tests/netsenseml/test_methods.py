"""The method registry: one grammar, properties that match the compressors, no torch import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from netsenseml import methods
from tests.workloads.ranks import REPO


@pytest.mark.parametrize(
    "bad",
    ["", "foo", "zip:3", "topk", "topk:0", "topk:1.5", "topk:abc", "randomk:nan", "int8:3",
     "allreduce:2", "powersgd", "powersgd:0", "powersgd:2.5", "netsenseml:1", "pkg.mod:",
     "pkg.mod:Name:", ":Name", "pkg..mod:Name", "pkg.mod:1Name", 42, None],
)
def test_methods_grammar_refuses_in_one_line_naming_the_forms(bad):
    with pytest.raises(ValueError) as err:
        methods.parse(bad)
    msg = str(err.value)
    assert "\n" not in msg and repr(bad) in msg
    assert msg.endswith(f"accepted: {methods.METHOD_FORMS}")
    for form in ("allreduce", "topk:R (0<R<=1)", "powersgd:RANK", "netsenseml", "package.module:Name"):
        assert form in msg


def test_methods_grammar_accepts_builtins_and_plugins_without_importing():
    assert methods.parse("topk:0.01").ratio == 0.01
    assert methods.parse("powersgd:4").rank == 4
    assert methods.parse("none").name == "allreduce" and methods.parse("none").level == "none"
    spec = methods.parse("no_such_pkg.codecs:Sign:0.5")  # syntax only: nothing imported
    assert spec.plugin and spec.name == "no_such_pkg.codecs:Sign" and spec.arg == "0.5"
    assert spec.level == "Sign"
    with pytest.raises(ValueError, match="cannot import 'no_such_pkg.codecs'.*PYTHONPATH"):
        methods.resolve(spec)


def test_methods_compressor_view_refuses_non_compressors():
    with pytest.raises(ValueError) as err:
        methods.parse("powersgd:2", kind="compressor")
    assert "not a compressor" in str(err.value)
    assert str(err.value).endswith(f"accepted: {methods.forms('compressor')}")
    assert "powersgd" not in methods.forms("compressor")


def test_methods_import_stays_torch_free():
    """Scenario and sweep validation read the registry without importing torch."""
    code = (
        "import sys, netsenseml.methods as m, testbed.config.scenario as s, testbed.config.sweep\n"
        "s.check_method('topk:0.1'); s.check_method('tests.jobs.hang_codec:HangAt3:0.5')\n"
        "print(sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_methods_registry_matches_the_compressors_it_names():
    """lossy / reduction / wire bytes registered once must be what the classes really do."""
    import torch

    # a fixed draw: random-k draws with replacement (~0.5 % duplicates at R=0.01)
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(0))
    for info in methods.infos():
        if info.kind != "compressor":
            continue
        spec = info.name if info.arg is None else f"{info.name}:0.01"
        c = methods.load(spec).build()
        assert (c.lossy, c.reduction) == (info.lossy, info.reduction), info.name
        payload = c.compress(x, seed=1)
        expected = methods.bytes_ratio(info.label, 0.01) * 4 * x.numel()
        if info.options.get("method") == "sampled":
            # DGC's sampled threshold keeps at most k (its all-gather pads to k) and, below
            # k/2, falls back to the exact selection: its contract, whatever the sample drew
            assert 0.5 * expected <= payload.nbytes <= expected + 8, info.name
        else:
            assert payload.nbytes == pytest.approx(expected, rel=0.01, abs=8), info.name
        if c.max_nbytes is not None:  # declared on compress.base.Codec
            assert payload.nbytes <= c.max_nbytes(x.numel()), info.name


def test_methods_accessors_for_policy_and_plots():
    assert [i.label for i in methods.ladder()] == ["none", "fp16", "bf16", "int8", "topk"]
    assert methods.level_order()[:5] == ("none", "fp16", "bf16", "int8", "topk")
    assert methods.bytes_ratio("none") == 1.0 and methods.bytes_ratio("int8") == 0.25
    assert methods.bytes_ratio("topk", 0.01) == pytest.approx(0.02)
    with pytest.raises(KeyError):
        methods.bytes_ratio("powersgd")


def test_methods_register_refuses_a_taken_name():
    with pytest.raises(ValueError, match="taken"):
        methods.register(methods.MethodInfo("topk", "compressor", "x:Y", "", reduction="allgather"))


def test_methods_plugins_doc_examples_load(tmp_path, monkeypatch):
    """The files shown in netsenseml/PLUGINS.md import and pass the checks the worker runs."""
    import re

    import torch

    doc = (REPO / "netsenseml" / "PLUGINS.md").read_text()
    files = {}
    for block in re.findall(r"```python\n(.*?)```", doc, flags=re.S):
        first = block.splitlines()[0]
        if first.startswith("# ") and first.split()[1].endswith(".py"):
            files[first.split()[1]] = block
    assert set(files) == {"my_codecs.py", "my_hooks.py"}
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    sign = methods.load("my_codecs:ScaledSign")
    assert sign.kind == "compressor" and sign.info.lossy and sign.info.name == "scaledsign"
    c = sign.build()
    x = torch.randn(1000)
    y = c.decompress(c.compress(x))
    assert torch.equal(y.sign(), torch.where(x >= 0, 1.0, -1.0))
    assert methods.load("my_hooks:mean_hook").kind == "hook"
    assert methods.load(
        "torch.distributed.algorithms.ddp_comm_hooks.default_hooks:fp16_compress_hook"
    ).kind == "hook"
