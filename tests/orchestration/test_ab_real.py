"""``netsense ab`` for real: the smoke scenario, one arm of this code and the same method
at HEAD (a revision's checkout, runs in a child process), one seed each.

What only a real run shows: both kinds of arm make ordinary, finished run folders where the
analysis reads them, a revision's run records that revision's commit, ab.json holds the
interleaved order, and the checkout is gone afterwards (no folder, no git worktree).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis import tables
from testbed.orchestration import ab as run_ab
from tests.cli.invoke import netsense_proc

pytestmark = [pytest.mark.emulation, pytest.mark.slow]  # slow: two real arms' runs


def test_ab_smoke_with_a_revision_arm(tmp_path: Path) -> None:
    head = run_ab._git("rev-parse", "HEAD").stdout.strip()
    res = tmp_path / "res"
    # one second of training per arm (no rate cut: it would come after the end): what is
    # checked is where the arms' runs go and what they record, not their throughput; the
    # revision's run gets the same --set (its config.json holds it)
    proc = netsense_proc(["ab", "smoke", "-a", "allreduce", "-a", "allreduce@HEAD",
                          "--seeds", "0", "-r", str(res), "--set", "workload.time_limit_s=1",
                          "--set", "timeline=[]"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1/2] start  allreduce  seed 0" in proc.stdout
    assert "[2/2] ok     allreduce@HEAD  seed 0" in proc.stdout
    root = res / "ab-smoke"
    data = json.loads((root / "ab.json").read_text())
    assert data["order"] == [["allreduce", 0], ["allreduce@HEAD", 0]]
    assert data["commits"] == {"allreduce@HEAD": head}
    assert [(r["arm"], r["n"]) for r in data["rows"]] == [("allreduce", 1),
                                                          ("allreduce@HEAD", 1)]
    (rev_run,) = (root / "allreduce-HEAD" / "smoke").iterdir()
    config = json.loads((rev_run / "config.json").read_text())
    assert config["versions"]["git"].startswith(head[:12])
    assert config["scenario"]["workload"]["time_limit_s"] == 1 and not config["scenario"]["timeline"]
    runs, _ = tables.load_runs(root)
    assert sorted(runs["status"]) == ["ok", "ok"]
    assert not list(root.glob(".rev-*"))
    # other checkouts of this repository may come and go meanwhile: only ours must be gone
    assert str(tmp_path) not in run_ab._git("worktree", "list").stdout
