"""Every shipped scenario (testbed/scenarios/*.yaml) loads
with current field names: ``netsense show`` on each prints nothing on stderr (no deprecation
note of ``testbed.config.renames``, no warning). One process for all (CliRunner), the notes'
once-per-process memory cleared before each file so no note can hide behind an earlier one."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.app import app
from testbed.config import renames

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "testbed" / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_show_prints_no_note_or_warning(path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    renames._said.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = CliRunner().invoke(app, ["show", path.stem])
    out, err = capfd.readouterr()
    assert res.exit_code == 0, res.output
    stderr = getattr(res, "stderr", "") if res.stderr_bytes is not None else ""
    notes = [line for line in (stderr + err + res.output).splitlines()
             if line.lower().startswith(("note:", "warning"))]
    assert not notes, notes
    assert not [str(w.message) for w in caught]
