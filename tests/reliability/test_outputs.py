"""An output location that cannot hold results (a file, a read-only
folder, a pseudo-filesystem) is refused by every command that writes, with one line and
exit 2, before anything is built."""

from __future__ import annotations

import os

import pytest

from tests.cli.invoke import netsense
from tests.reliability.helpers import NETSENSE, env_for, in_private_mount, one_line_error


def _commands(out: str, results: str) -> dict[str, list[str]]:
    return {
        "run": ["run", "smoke", "--results", out],
        "sweep": ["sweep", "tiny", "--results", out],
        "plot": ["plot", results, "--figures", out],
        "report-figures": ["report", results, "--figures", out],
    }


@pytest.mark.parametrize("target", ["file", "under-file", "proc", "sys", "dev"])
@pytest.mark.parametrize("command", ["run", "sweep", "plot", "report-figures"])
def test_unusable_output_folder_one_line(tmp_path, monkeypatch, target, command):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "results").mkdir()
    out = {"file": str(tmp_path / "afile"), "under-file": str(tmp_path / "afile" / "sub"),
           "proc": "/proc/netsense-out", "sys": "/sys/kernel/netsense-out",
           "dev": "/dev/netsense-out"}[target]
    res = netsense(_commands(out, str(tmp_path / "results"))[command], tmp_path, monkeypatch)
    assert res.exit_code == 2, res.output
    one_line_error(res.stderr, "error:", repr(out))
    assert not os.path.exists(out) or target == "file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "results", "state"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["afile", "results"]


def test_report_out_must_be_a_file(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    res = netsense(["report", str(tmp_path / "results"), "--html", str(tmp_path)], tmp_path,
                   monkeypatch)
    assert res.exit_code == 2
    one_line_error(res.stderr, "--html", "is a folder")


@pytest.mark.root("to mount a read-only tmpfs in a private mount namespace", "unshare")
def test_read_only_folder_refused_even_for_root(tmp_path):
    """Root ignores permission bits but not a read-only mount: writability is tried."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (tmp_path / "results").mkdir()
    env, _ = env_for(tmp_path)
    script = (f"mount -t tmpfs -o ro none {ro} || exit 99; "
              f"for args in 'run smoke --results {ro}/res' 'sweep tiny --results {ro}/res' "
              f"'plot {tmp_path}/results --figures {ro}/f' "
              f"'report {tmp_path}/results --html {ro}/r.html'; do "
              f"{NETSENSE} $args; echo \"rc=$?\"; done")
    proc = in_private_mount(script, env, tmp_path, timeout=120)
    assert proc.stdout.split() == ["rc=2"] * 4, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 4 and all("Read-only file system" in ln for ln in lines), lines
    assert "Traceback" not in proc.stderr
