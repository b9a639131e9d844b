"""``netsense report`` and ``plot`` never write into a results tree git tracks (the committed
evaluation under ``results/runs/``) unless an output is named: a report of the committed runs
used to leave ``figures/`` and ``report.html`` as untracked files in ``git status``. Its
default view: a comparison on fewer than 3 seeds a side is not called "won", and degraded
runs are named.

A real git repository in a temporary folder, with the project's own ignore rules for
``results/``, holds a committed tree of run folders.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from testbed.analysis import tables
from tests.reliability.helpers import run_cli
from tests.reliability.run_folders import good_run

REPO = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                           *args], capture_output=True, text=True, check=True).stdout


def _committed_tree(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "clone"
    repo.mkdir()
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    tree = repo / "results" / "runs" / "ev"
    for rate in (10, 50):
        for m in ("allreduce", "netsenseml"):
            good_run(tree, rate, m)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "runs")
    assert _git(repo, "status", "--porcelain") == ""
    return repo, tree


def test_report_and_plot_of_a_committed_tree_write_beside_it_and_say_where(tmp_path) -> None:
    repo, tree = _committed_tree(tmp_path)
    view = repo / "results" / "views" / "runs" / "ev"
    for cmd in (["report", "-r", str(tree)], ["plot", "-r", str(tree)]):
        proc = run_cli(cmd, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert f"{tree} is a committed results tree (git tracks it): not writing into it; " \
               f"output in {view}" in proc.stderr, proc.stderr
        assert _git(repo, "status", "--porcelain") == ""  # nothing new in the checkout
        assert not (tree / "figures").exists() and not (tree / "report.html").exists()
    assert (view / "report.html").is_file() and any((view / "figures").glob("*.png"))
    # told where: written there, whatever git thinks of it
    proc = run_cli(["report", "-r", str(tree), "-f", str(tree / "figures"), "--html",
                    str(tree / "report.html")], tmp_path)
    assert proc.returncode == 0 and "committed results tree" not in proc.stderr, proc.stderr
    assert (tree / "report.html").is_file()


def test_a_tree_git_does_not_track_gets_its_outputs_inside_as_before(tmp_path) -> None:
    root = tmp_path / "results"
    for rate in (10, 50):
        for m in ("allreduce", "netsenseml"):
            good_run(root, rate, m)
    proc = run_cli(["report", "-r", str(root)], tmp_path)
    assert proc.returncode == 0 and "committed" not in proc.stderr, proc.stderr
    assert (root / "report.html").is_file() and (root / "figures").is_dir()


def test_a_comparison_on_fewer_than_3_seeds_is_not_called_won() -> None:
    assert tables._call(1.5, 1.2, 1.8, 3) == "won"
    assert tables._call(1.5, 1.2, 1.8, 2) == "few seeds (2)"  # an interval, but 2 seeds a side
    assert tables._call(1.5, float("nan"), float("nan"), 1) == "few seeds (1)"  # was "won?"
    assert tables._call(0.5, 0.4, 0.6, 6) == "lost"


def test_the_report_names_degraded_runs_and_says_what_the_statistics_count(tmp_path) -> None:
    root = tmp_path / "results"
    for rate in (10, 50):
        for m in ("allreduce", "netsenseml"):
            d = good_run(root, rate, m)
    summary = json.loads((d / "summary.json").read_text())
    summary["degraded"] = "the host did not keep up: 4.0 % of steps overran their slot"
    (d / "summary.json").write_text(json.dumps(summary))
    html = root / "report.html"
    for flags, says in (([], "What the statistics count: 1 degraded run (the host did not keep "
                             "up with the emulated accelerator) left out"),
                        (["--include-degraded"], "What the statistics count: 1 degraded run(s) "
                                                 "counted (--include-degraded)")):
        proc = run_cli(["report", "-r", str(root), *flags], tmp_path)
        assert proc.returncode == 0, proc.stderr
        page = html.read_text()
        assert says in page, page[:3000]
        assert "Left out of the statistics" not in page  # "... counted" under that title
        assert "Degraded runs (1)" in page and "netsenseml-s0" in page
        assert "4.0 % of steps overran" in page
