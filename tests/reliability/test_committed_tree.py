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

import pytest

from testbed.analysis import tables
from tests.reliability.helpers import NETSENSE, env_for, run_cli
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
    assert tables._call(1.5, 1.2, 1.8, 2) == "fewer than 3 seeds (2)"  # an interval, but 2 seeds a side
    assert tables._call(1.5, float("nan"), float("nan"), 1) == "fewer than 3 seeds (1)"  # was "won?"
    assert tables._call(0.5, 0.4, 0.6, 6) == "lost"


def _runs_one_degraded(root: Path) -> None:
    """Four good runs (two rates, two methods) under ``root``, the last marked degraded."""
    for rate in (10, 50):
        for m in ("allreduce", "netsenseml"):
            d = good_run(root, rate, m)
    summary = json.loads((d / "summary.json").read_text())
    summary["degraded"] = "the host did not keep up: 4.0 % of steps overran their slot"
    (d / "summary.json").write_text(json.dumps(summary))


def test_the_report_names_degraded_runs_and_says_what_the_statistics_count(tmp_path) -> None:
    root = tmp_path / "results"
    _runs_one_degraded(root)
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


#: A real committed evaluation (12 packed runs of two arms and the ab.json of their session):
#: every analysis command is run on a copy of it, committed in a repository of its own.
REAL_TREE = REPO / "results" / "runs" / "accel-policy" / "static5"


def _real_committed_tree(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "clone"
    repo.mkdir()
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    tree = repo / "results" / "runs" / "static5"
    shutil.copytree(REAL_TREE, tree)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "runs")
    return repo, tree


@pytest.mark.slow  # nine commands on 12 real runs: ~45 s on the 2-core build machine
def test_no_analysis_command_writes_into_a_committed_tree_unless_told(tmp_path) -> None:
    """ab --from-runs, sensing, compare (run from inside the tree), report, plot and export
    on the committed runs: ``git status`` stays clean, each says where its output went; an
    output named with -o/--out is written there (ab --from-runs used to write its
    ab-<metric>-<arms>.json into the committed folder, sensing its three files into the run)."""
    if not REAL_TREE.is_dir():
        pytest.skip("no committed accel-policy/static5 tree")
    repo, tree = _real_committed_tree(tmp_path)
    view = repo / "results" / "views" / "runs" / "static5"
    run = next(tree.rglob("*-netsenseml-s0"))
    before = {p for p in tree.rglob("*")}
    cmds = [(["ab", "--from-runs", str(tree), "--metric", "tta"], tmp_path, view / "ab.json"),
            (["ab", "--from-runs", str(tree), "-a", "topk:0.01", "-a", "netsenseml"], tmp_path,
             view / "ab-throughput-topk-0.01_vs_netsenseml.json"),
            (["sensing", str(run)], tmp_path,
             view / run.relative_to(tree) / "sensing.json"),
            (["compare", "."], tree, view / "compare" / "compare.csv"),
            (["report", "-r", str(tree)], tmp_path, view / "report.html"),
            (["plot", "-r", str(tree)], tmp_path, view / "figures"),
            (["export", str(tree), "--tensorboard", str(tmp_path / "tb")], tmp_path, None)]
    for cmd, cwd, made in cmds:
        env, _ = env_for(tmp_path)
        proc = subprocess.run([str(NETSENSE), *cmd], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=300)
        assert proc.returncode == 0, (cmd, proc.stderr)
        assert _git(repo, "status", "--porcelain") == "", cmd  # nothing new, nothing changed
        assert {p for p in tree.rglob("*")} == before, cmd
        if made is not None:
            assert made.exists(), (cmd, proc.stdout, proc.stderr)
            assert "is a committed results tree (git tracks it): not writing into it" \
                in proc.stderr, (cmd, proc.stderr)
    # told where: written there, the committed record rewritten only when asked to
    proc = run_cli(["ab", "--from-runs", str(tree), "--metric", "tta", "-o", str(tree)],
                   tmp_path)
    assert proc.returncode == 0 and "committed results tree" not in proc.stderr, proc.stderr
    changed = [ln for ln in _git(repo, "diff", "-U0").splitlines()
               if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    # the committed record rewritten by today's code: the same numbers; only where it was
    # read from and the scenario (a read-back now records its runs' scenario) differ
    assert changed and all('"from_runs"' in ln or '"scenario"' in ln for ln in changed), changed
    proc = run_cli(["ab", "smoke", "-o", str(tmp_path / "x")], tmp_path)
    assert proc.returncode == 2 and "--out: only with --from-runs" in proc.stderr


def test_the_committed_ab_comparisons_of_a_trees_scenarios_are_found_beside_it() -> None:
    """accel-crossover's d70 runs 2 seeds a method (one of NetSenseML's degraded); the
    evaluation's answer for accel-d70 is the 6-seed A/B committed in accel-policy/d70: the
    report of accel-crossover finds it (and accel-static's), each folder's session first."""
    from testbed.analysis import ab_stats as stats_ab

    runs = REPO / "results" / "runs"
    if not (runs / "accel-policy" / "d70" / "ab.json").is_file():
        pytest.skip("no committed accel-policy comparisons")
    recs = stats_ab.related_records(runs / "accel-crossover", {"accel-d70", "accel-static"},
                                    runs)
    where = [str(Path(r["path"]).relative_to(runs)) for r in recs]
    assert where[:3] == ["accel-policy/d70/ab.json",
                         "accel-policy/d70/ab-throughput-fp16_vs_int8.json",
                         "accel-policy/static5/ab.json"], where
    assert {r["scenario"] for r in recs} == {"accel-d70", "accel-static"}  # recorded or found
    assert not any("paper" in w for w in where)  # another scenario's are not its answer


def _ab_record(tree: Path, seeds: int) -> None:
    """An ab.json of two arms over ``seeds`` seeds whose ratio's interval excludes 1."""
    from testbed.analysis import ab_stats as stats_ab

    obs = [stats_ab.Observation(arm, s, "ok", v * (1 + 0.001 * s), f"{arm}-s{s}")
           for arm, v in (("allreduce", 100.0), ("netsenseml", 200.0)) for s in range(seeds)]
    res = stats_ab.compare(obs, ["allreduce", "netsenseml"])
    stats_ab.write(tree, res, obs, {"scenario": "t", "metric": "throughput",
                                    "field": "throughput_samples_per_s",
                                    "seeds": list(range(seeds))})


def test_the_report_leads_with_the_ab_comparisons_and_calls_none_on_2_seeds(tmp_path) -> None:
    from testbed.analysis import report

    root = tmp_path / "results"
    _runs_one_degraded(root)
    _ab_record(root / "sw", 2)
    _ab_record(root / "sw" / "rate", 3)
    page = report.build_report(root, tmp_path / "r.html", tmp_path / "fig",
                               log=lambda m: None).read_text()
    ab_at, claim_at = page.index("A/B comparisons (netsense ab)"), page.index("<h2>Throughput")
    assert ab_at < claim_at
    assert page.index("sw/ab.json: t, throughput, 2 seeds per arm") < claim_at
    two = page[page.index("sw/ab.json"):page.index("sw/rate/ab.json")]
    assert "fewer than 3 seeds (2+2): not called" in two and "faster" not in two
    assert "[" in two  # the interval is still shown
    three = page[page.index("sw/rate/ab.json"):page.index("mean ±: half-width", ab_at)]
    assert "faster" in three and "fewer than" not in three
    # degraded runs named before the figures, not after them
    assert page.index("Degraded runs (1)") < page.index("<h2>Figures</h2>")
