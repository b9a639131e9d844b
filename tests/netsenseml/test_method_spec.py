"""The method spec: parsed once where a method enters, carried as a value, asked by each
layer (its codecs, its collective, whether it adapts, its prior, its label), answered from
the registry (issue 51, part 1; the run path's side: tests/orchestration/test_method_path.py)."""

from __future__ import annotations

import pytest

from netsenseml import methods

BUILT_INS = ("allreduce", "none", "fp16", "bf16", "int8", "topk:0.01", "randomk:0.5",
             "dgc:0.01", "powersgd:4", "netsenseml", "netsenseml-paper", "stellatrain",
             "accordion")


@pytest.mark.parametrize("text", BUILT_INS)
def test_each_layers_question_is_answered_from_the_registry(text: str) -> None:
    spec = methods.parse(text)
    info = methods.get(spec.name)
    assert spec.adaptive == (info.kind == "adaptive")
    assert spec.collective == info.reduction
    assert spec.label == spec.level == info.label
    assert spec.reference == (info.name == "allreduce")
    assert spec.reads_prior == (info.name == "netsenseml") == spec.takes_calibration
    assert spec.momentum_correction == (info.name == "dgc")
    assert spec.needs_values == (info.name == "accordion")
    assert spec.payload_hook == (info.name == "powersgd")
    assert spec.dense_steps == (2 if info.name == "powersgd" else 0)
    assert spec.topk_ratio == (spec.ratio if info.name in ("topk", "dgc") else None)
    assert spec.calibrated == (info.name == "netsenseml")
    assert spec.ladder == (info.ladder and info.kind != "adaptive")
    if info.wire is None or spec.adaptive:
        assert spec.wire is None
    else:
        assert spec.wire == methods.bytes_ratio(info.label, spec.ratio or 1.0)
    codecs = [str(c) for c in spec.codecs()]
    if spec.adaptive:
        assert codecs == list(methods.ADAPTIVE_CODECS)
    elif info.kind == "compressor" and not spec.reference:
        assert codecs == [text]
    else:
        assert codecs == []  # dense, or a hook the pacer holds no codec of


def test_level_keys_round_trip_through_the_spec() -> None:
    assert methods.parse("allreduce").level_key == "none"
    assert methods.parse("topk:0.010").level_key == "topk:0.01"
    assert methods.parse("netsenseml").level_key is None  # adaptive: no fixed level
    assert methods.parse("dgc:0.01").level_key is None  # not a ladder level
    for key in ("none", "fp16", "bf16", "int8", "topk:0.1", "topk:0.001"):
        assert methods.level_spec(key).level_key == key
    assert methods.split_level("topk:0.01") == ("topk", 0.01)
    assert methods.split_level("int8") == ("int8", 1.0)
    with pytest.raises(ValueError, match=r"unknown level 'dgc'; accepted: none, fp16"):
        methods.level_spec("dgc")


def test_a_spec_keeps_the_text_as_written() -> None:
    """The records, the folder names and the worker's argv carry ``str(spec)``: the text the
    scenario or the command line gave, so they are what they were before the spec."""
    for text in ("TopK:0.01", "none", " fp16", "tests.jobs.hang_codec:HangAt3:0.5"):
        assert str(methods.parse(text)) == text
    assert methods.parse("TopK:0.01").name == "topk"


def test_parsing_a_spec_again_is_the_spec_itself() -> None:
    spec = methods.parse("dgc:0.01")
    assert methods.parse(spec) is spec and methods.as_spec(spec) is spec
    assert methods.parse(spec, kind="compressor") is spec
    with pytest.raises(ValueError, match="not a compressor"):
        methods.parse(methods.parse("powersgd:2"), kind="compressor")


@pytest.mark.parametrize(("label", "ratio", "text"), [
    ("none", 1.0, "allreduce"), ("fp16", 1.0, "fp16"), ("bf16", 0.3, "bf16"),
    ("int8", 1.0, "int8"), ("topk", 0.0123456789, "topk:0.0123457"), ("topk", 1.0, "topk:1")])
def test_a_decision_is_the_fixed_method_it_sends_without_a_parse(label: str, ratio: float,
                                                                   text: str) -> None:
    """``at_level`` builds what parsing the decision's text built (the simulation's steps)."""
    assert methods.at_level(label, ratio) == methods.parse(text)
    assert str(methods.at_level(label, ratio)) == text
    with pytest.raises(KeyError):
        methods.at_level("dgc", 0.01)  # not a ladder level
    assert [str(s) for s in methods.ladder_specs()] == ["allreduce", "fp16", "bf16", "int8",
                                                         "topk:1"]
    assert [str(s) for s in methods.dense_levels()] == ["allreduce", "fp16", "bf16", "int8"]


def test_a_files_method_is_read_or_passed_over() -> None:
    assert methods.read("topk:0.01") == methods.parse("topk:0.01")
    assert methods.read("topk:2") is None and methods.read(None) is None
