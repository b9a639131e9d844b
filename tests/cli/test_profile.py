"""``netsense profile``: measures a profile entry on this machine (the tiny mlp on the CPU),
writes a new profile file, adds a second entry to it, lists it with ``--check``; refuses bad
input in one line (exit 2) and leaves nothing behind; a scenario naming a malformed profile
is refused by ``netsense show``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from netsenseml import accelerator
from tests.cli.test_cli import GOOD, netsense

TINY = ["--model", "mlp", "--dataset", "mixture", "--model-args", "width=32", "--device", "cpu",
        "--steps", "3", "--threads", "1", "--codecs", "fp16,topk:0.01"]


def _one_error_line(result, *needles: str) -> str:
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_profile_writes_a_file_then_adds_an_entry(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "prof" / "mine.json"
    first = netsense(["profile", *TINY, "--batch-size", "16", "-o", str(out)], tmp_path,
                     monkeypatch)
    assert first.exit_code == 0, first.stderr
    prof = accelerator.load(str(out))
    assert prof.name == "mine" and len(prof.entries) == 1
    assert "netsense profile" in prof.source and prof.device in prof.source
    assert prof.timing("mlp", {"width": 32}, 16).origin == "measured"

    second = netsense(["profile", *TINY, "--batch-size", "32", "-o", str(out)], tmp_path,
                      monkeypatch)
    assert second.exit_code == 0, second.stderr
    assert "added" in second.stdout
    prof = accelerator.load(str(out))
    assert [(e.model, e.batch_size) for e in prof.entries] == [("mlp", 16), ("mlp", 32)]
    t = prof.timing("mlp", {"width": 32}, 32)
    assert t.forward_s > 0 and t.backward_s > 0 and set(t.codec_s_per_mb) == {"fp16", "topk"}

    listed = netsense(["profile", "--check", str(out)], tmp_path, monkeypatch)
    assert listed.exit_code == 0, listed.stderr
    assert "2 entries" in listed.stdout and "mlp[width=32] batch 32" in listed.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["mine.json"]  # no temporary left


BAD = {
    "unknown-model": (["--model", "nosuch", "--batch-size", "4"], ["--model", "mlp"]),
    "bad-batch": (["--model", "mlp", "--dataset", "digits", "--batch-size", "0"],
                  ["--batch-size", "allowed: 1..1438"]),
    "batch-over-data": (["--model", "mlp", "--dataset", "digits", "--batch-size", "5000"],
                        ["--batch-size", "allowed: 1..1438"]),
    "dataset-unfit": (["--model", "mlp", "--dataset", "text", "--batch-size", "4"],
                      ["--dataset", "mixture"]),
    "unknown-knob": (["--model", "mlp", "--batch-size", "4", "--model-args", "depth=2"],
                     ["--model-args", "width"]),
    "device": (["--model", "mlp", "--batch-size", "4", "--device", "tpu"],
               ["--device", "auto, cpu, cuda"]),
    "codec": (["--model", "mlp", "--batch-size", "4", "--codecs", "fp16,zip"],
              ["--codecs", "topk:R"]),
    "steps": (["--model", "mlp", "--batch-size", "4", "--steps", "0"], ["--steps", "1.."]),
    "unwritable-out": (["--model", "mlp", "--batch-size", "4", "-o", "/proc/p.json"],
                       ["-o", "pseudo-filesystem"]),
    "out-a-folder": (["--model", "mlp", "--batch-size", "4", "-o", "."], ["-o", "folder"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_profile_refuses_bad_input_in_one_line(tmp_path: Path, monkeypatch, case) -> None:
    args, needles = BAD[case]
    before = sorted(tmp_path.iterdir())
    result = netsense(["profile", *args], tmp_path, monkeypatch)
    _one_error_line(result, *needles)
    assert result.stdout == ""
    assert sorted(tmp_path.iterdir()) == before


def test_profile_never_overwrites_a_file_that_is_no_profile(tmp_path: Path, monkeypatch) -> None:
    other = tmp_path / "notes.json"
    other.write_text('{"mine": true}\n')
    result = netsense(["profile", *TINY, "--batch-size", "16", "-o", str(other)], tmp_path,
                      monkeypatch)
    _one_error_line(result, "-o", "not a valid profile", "format")
    assert other.read_text() == '{"mine": true}\n'


def _malformed(tmp_path: Path) -> Path:
    data = json.loads((accelerator.PROFILES_DIR / "a100-estimated.json").read_text())
    data["entries"][0]["buckets"] = [0.9, 0.2]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


def test_check_refuses_a_malformed_profile_in_one_line(tmp_path: Path, monkeypatch) -> None:
    path = _malformed(tmp_path)
    result = netsense(["profile", "--check", str(path)], tmp_path, monkeypatch)
    _one_error_line(result, "--check", "entries[0].buckets")
    result = netsense(["profile", "--check", "no-such-profile"], tmp_path, monkeypatch)
    _one_error_line(result, "--check", "a100-estimated")


def test_show_refuses_a_scenario_naming_a_malformed_profile(tmp_path: Path, monkeypatch) -> None:
    _malformed(tmp_path)
    scenario = tmp_path / "paced.yaml"
    scenario.write_text(yaml.safe_dump({**GOOD, "name": "paced",
                                        "accelerator": {"profile": "broken.json"}}))
    result = netsense(["show", str(scenario)], tmp_path, monkeypatch)
    _one_error_line(result, "accelerator.profile", "entries[0].buckets")
