"""``netsenseml.accelerator``: profile files.

Loading: a malformed profile is refused with one line naming the field (``ProfileError``),
before any worker starts. (Pacing tests may join this file; keep each group in its own
clearly named functions.)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from netsenseml import accelerator

GOOD: dict[str, Any] = {
    "format": 1, "name": "t", "device": "a test device", "source": "written by a test",
    "entries": [{"model": "mlp", "knobs": {"width": 64}, "batch_size": 32,
                 "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0005,
                 "codec_s_per_mb": {"fp16": 0.0001}, "buckets": [0.5, 1.0],
                 "origin": "measured", "note": "n"}],
}


def _load_refusal(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(accelerator.ProfileError) as err:
        accelerator.load(str(path))
    message = str(err.value)
    assert "\n" not in message
    return message


def _with_entry(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["entries"][0].update(changes)
    return data


def test_load_reads_a_good_profile(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(GOOD))
    timing = accelerator.load(str(path)).timing("mlp", {"width": 64}, 32)
    assert timing.step_s == pytest.approx(0.0035)
    assert timing.buckets == (0.5, 1.0) and timing.origin == "measured"


def test_load_refuses_a_missing_forward_s(tmp_path: Path) -> None:
    data = copy.deepcopy(GOOD)
    del data["entries"][0]["forward_s"]
    assert "entries[0].forward_s: missing" in _load_refusal(tmp_path, data)


def test_load_refuses_a_negative_time(tmp_path: Path) -> None:
    message = _load_refusal(tmp_path, _with_entry(optimizer_s=-0.1))
    assert "entries[0].optimizer_s" in message and "-0.1" in message
    message = _load_refusal(tmp_path, _with_entry(codec_s_per_mb={"int8": -1}))
    assert "codec_s_per_mb.int8" in message


def test_load_refuses_an_unknown_field(tmp_path: Path) -> None:
    message = _load_refusal(tmp_path, _with_entry(forwrd_s=0.1))
    assert "entries[0].forwrd_s: unknown field" in message and "forward_s" in message


def test_load_refuses_a_wrong_format_number(tmp_path: Path) -> None:
    data = {**GOOD, "format": 2}
    assert "format: 1 expected, got 2" in _load_refusal(tmp_path, data)


def test_load_refuses_buckets_not_increasing(tmp_path: Path) -> None:
    message = _load_refusal(tmp_path, _with_entry(buckets=[0.8, 0.4]))
    assert "entries[0].buckets" in message and "increasing" in message
    assert "entries[0].buckets" in _load_refusal(tmp_path, _with_entry(buckets=[0.5, 1.5]))


def test_load_refuses_an_origin_not_allowed(tmp_path: Path) -> None:
    message = _load_refusal(tmp_path, _with_entry(origin="guessed"))
    assert "entries[0].origin" in message and "measured, published, assumed" in message


def test_load_refuses_text_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(accelerator.ProfileError, match="not readable JSON"):
        accelerator.load(str(path))


def test_a_given_step_time_is_split_and_a_bad_one_refused() -> None:
    t = accelerator.Timing.from_step(0.01)
    assert (t.forward_s, t.backward_s, t.optimizer_s) == pytest.approx((0.003, 0.006, 0.001))
    with pytest.raises(accelerator.ProfileError, match="positive"):
        accelerator.Timing.from_step(0)
