"""``netsense profile``: measures a profile entry on this machine (the tiny mlp on the CPU),
writes a new profile file, adds a second entry to it, lists it with ``--check``; refuses bad
input in one line (exit 2) and leaves nothing behind; a scenario naming a malformed profile
is refused by ``netsense show``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from netsenseml import accelerator
from tests.cli.invoke import GOOD, netsense

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


# ------------------------------------------------------------------ doctor --profile


def _tiny_profile(tmp_path: Path) -> Path:
    """A profile whose entry for the tiny mlp is far faster than this CPU (so k > 1)."""
    data = {"format": 1, "device": "a fast test device", "source": "written by a test",
            "entries": [{"model": "mlp", "knobs": {"width": 32}, "batch_size": 16,
                         "forward_s": 2e-5, "backward_s": 4e-5, "optimizer_s": 1e-5,
                         "codec_s_per_mb": {"fp16": 1e-5}, "origin": "assumed"}]}
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_doctor_states_what_this_host_keeps_faithful_for_a_profile(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """One host timing of two copies (~10-20 s on a loaded 2-core machine)."""
    from testbed.config import faithful

    path = _tiny_profile(tmp_path)
    result = netsense(["doctor", "--profile", str(path), "--model", "mlp", "--dataset",
                       "mixture", "--batch-size", "16", "--model-args", "width=32",
                       "--workers", "2", "--method", "fp16", "--rate-mbit", "5000"],
                      tmp_path, monkeypatch)
    assert result.exit_code == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("accelerator: "))
    k = float(re.search(r"picks k = ([\d.]+)", line)[1])
    assert k >= 5  # at least the network's factor: 5000 Mbit/s over a 1000 Mbit/s range
    top = float(re.search(r"links up to ([\d.]+) Mbit/s", line)[1])
    assert top == pytest.approx(faithful.faithful_mbit() * k)
    fits = int(re.search(r"fits up to (\d+) workers", line)[1])
    assert fits >= 2  # the two measured fit at the factor chosen for them
    assert "rule:" in line and "2 workers x 1 thread" in line


def test_doctor_refuses_a_profile_without_the_entry_in_one_line(tmp_path: Path,
                                                                 monkeypatch) -> None:
    path = _tiny_profile(tmp_path)
    result = netsense(["doctor", "--profile", str(path), "--model", "mlp", "--batch-size",
                       "64"], tmp_path, monkeypatch)
    _one_error_line(result, "--profile", "no entry", "batch 16")
    result = netsense(["doctor", "--model", "mlp", "--batch-size", "16"], tmp_path, monkeypatch)
    _one_error_line(result, "--profile")
    result = netsense(["doctor", "--profile", str(path), "--model", "mlp", "--batch-size",
                       "16", "--model-args", "width=32", "--workers", "0"], tmp_path,
                      monkeypatch)
    _one_error_line(result, "--workers", "allowed: 1..")


def test_workers_within_follows_the_stated_rule() -> None:
    from testbed.config.factor import workers_within

    # 2 cores, 1 thread each, measured with 2 at once needing k = 4: at k = 4 nothing more
    # fits than the cores (a third worker would be 1.5x slower), at k = 8 twice as many.
    assert workers_within(need=4.0, k=4.0, workers=2, threads=1, cores=2) == 2
    assert workers_within(need=4.0, k=8.0, workers=2, threads=1, cores=2) == 4
    # measured oversubscribed (4 workers on 2 cores): the measurement already holds the 2x
    assert workers_within(need=4.0, k=4.0, workers=4, threads=1, cores=2) == 4
    # 2 threads each halve the count
    assert workers_within(need=1.0, k=4.0, workers=1, threads=2, cores=8) == 16
