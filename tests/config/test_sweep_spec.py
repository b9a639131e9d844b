"""Sweep files: validation, expansion into deterministic run folders, and CLI input errors.

These need no network; the real sweep (resume, tables, figures) is tests/test_sweep_real.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.config import sweep as sw
from testbed.orchestration.sweep import dry_run_rows, is_done
from tests.cli.apps import analysis_app

BASE = {
    "name": "t",
    "methods": ["allreduce", "topk:0.01"],
    "seeds": [0, 1],
    "overrides": {"workload.time_limit_s": 3},
    "experiments": [
        {"name": "rate", "kind": "throughput", "scenario": "smoke",
         "grid": {"topology.rate_mbit": [10, 100, 1000], "workload.batch_size": [16, 32]}},
        {"name": "ramp", "kind": "timeline", "scenario": "smoke", "methods": ["netsenseml"],
         "seeds": [3]},
    ],
}


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(json.dumps(data))  # JSON is YAML
    return p


def test_expand_is_cartesian_and_deterministic(tmp_path: Path) -> None:
    spec = sw.load_sweep(_write(tmp_path, BASE))
    runs = sw.expand(spec, tmp_path / "res")
    assert len(runs) == 3 * 2 * 2 * 2 + 1
    dirs = [r.run_dir for r in runs]
    assert len(set(dirs)) == len(dirs)
    assert dirs == [r.run_dir for r in sw.expand(spec, tmp_path / "res")]
    first = runs[0]
    assert first.run_dir == tmp_path / "res/t/rate/rate_mbit=10,batch_size=16/allreduce-s0"
    assert first.overrides == {"workload.time_limit_s": 3, "topology.rate_mbit": 10,
                               "workload.batch_size": 16}
    topk = [r for r in runs if r.method == "topk:0.01"][0]
    assert topk.run_dir.name == "topk-0.01-s0"
    last = runs[-1]
    assert (last.experiment, last.method, last.seed, last.params) == ("ramp", "netsenseml", 3, {})
    assert last.run_dir.parent.name == "base"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"colour": 1}, "colour: unknown field"),
        ({"methods": ["allreduce", "zip"]}, "unknown method 'zip'"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"experiments": []}, "give 'scenario' or a non-empty 'experiments'"),
        ({"name": "a/b"}, "name:"),
    ],
)
def test_bad_sweep_fields_name_the_field(tmp_path: Path, patch: dict, needle: str) -> None:
    with pytest.raises(sw.SweepError) as err:
        sw.load_sweep(_write(tmp_path, {**BASE, **patch}))
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_bad_grid_and_experiment_fields(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(BASE))
    bad["experiments"][0]["grid"] = {"topology.rate_mbit": []}
    with pytest.raises(sw.SweepError, match=r"experiments\[0\]\.grid: .*non-empty list"):
        sw.load_sweep(_write(tmp_path, bad))
    bad["experiments"][0]["grid"] = {"topology.rate_mbit": [1]}
    bad["experiments"][0]["kind"] = "speed"
    with pytest.raises(sw.SweepError, match=r"experiments\[0\]\.kind"):
        sw.load_sweep(_write(tmp_path, bad))


def test_unknown_sweep_name_lists_known() -> None:
    with pytest.raises(sw.SweepError, match="unknown sweep .*; available: .*paper-quick"):
        sw.load_sweep("no-such-sweep")


def test_bundled_sweeps_validate_and_expand(tmp_path: Path) -> None:
    """Every shipped sweep file parses, expands, and its scenarios validate with overrides."""
    names = sorted(p.stem for p in sw.SWEEPS_DIR.glob("*.yaml"))
    assert {"paper", "paper-quick", "tiny"} <= set(names)
    for name in names:
        runs = sw.expand(sw.load_sweep(name), tmp_path)
        resolved = sw.resolve_scenarios(runs, base_dir=sw.SWEEPS_DIR)
        assert resolved and all(r.scenario is not None for r in resolved)


def test_paper_quick_estimate_fits_twenty_minutes(tmp_path: Path) -> None:
    runs = sw.resolve_scenarios(sw.expand(sw.load_sweep("paper-quick"), tmp_path),
                                base_dir=sw.SWEEPS_DIR)
    _, total = dry_run_rows(runs)
    assert total < 20 * 60


def test_resume_status_reads_summary(tmp_path: Path) -> None:
    d = tmp_path / "run"
    assert not is_done(d)
    d.mkdir()
    (d / "summary.json").write_text('{"status": "failed"}')
    assert not is_done(d)
    (d / "summary.json").write_text('{"status": "ok"')  # torn file: not done
    assert not is_done(d)
    (d / "summary.json").write_text('{"status": "ok"}')
    assert is_done(d)



def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = _write(tmp_path, {**BASE, "methods": ["nope"]})
    res = runner.invoke(analysis_app(), ["sweep", str(bad), "--results", str(tmp_path / "r"), "--dry-run"])
    assert res.exit_code == 2
    assert "unknown method 'nope'" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "r").exists()
    res = runner.invoke(analysis_app(), ["plot", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such folder" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(analysis_app(), ["report", str(empty)])
    assert res.exit_code == 2 and "no run folders" in res.output


def test_cli_dry_run_lists_runs_and_estimate(tmp_path: Path) -> None:
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(tmp_path), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "6 pending, 0 done" in res.output  # the per-experiment summary, not every row
    assert res.output.count("pending") == 2  # header + total line
    assert "estimated" in res.output and "min" in res.output
    verbose = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "-r", str(tmp_path), "-n", "-v"])
    assert verbose.exit_code == 0 and verbose.output.count("pending") >= 6  # + one per run
    assert not (tmp_path / "tiny").exists()


def test_cli_method_filter_runs_only_that_method(tmp_path: Path) -> None:
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(tmp_path), "--dry-run",
                                      "--method", "topk:0.01"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "sweep tiny: 2 runs" in res.output and "2 pending, 0 done" in res.output
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(tmp_path),
                                      "--method", "topk:0.5"])
    assert res.exit_code == 2
    assert "--method: 'topk:0.5' is not in sweep tiny" in res.output
    assert not (tmp_path / "tiny").exists()


def test_cli_point_and_seed_select_a_part_and_refuse_what_names_nothing(tmp_path: Path) -> None:
    def dry(*extra: str) -> object:
        return CliRunner().invoke(analysis_app(), ["sweep", "tiny", "-r", str(tmp_path), "-n",
                                                   *extra], terminal_width=200)

    res = dry("--point", "bottleneck_mbit=20")
    assert res.exit_code == 0, res.output
    assert "sweep tiny: 3 runs" in res.output  # 3 methods at one of the two rates
    both = dry("--point", "bottleneck_mbit=20", "--point", "bottleneck_mbit=200", "-v")
    assert "sweep tiny: 6 runs" in both.output and "bottleneck_mbit=200" in both.output
    narrowed = dry("--point", "bottleneck_mbit=200", "--method", "allreduce", "--seed", "0")
    assert "sweep tiny: 1 runs" in narrowed.output, narrowed.output
    for extra, says in [(("--point", "bottleneck_mbit=21"), "not a grid value; values: 20, 200"),
                        (("--point", "rate_mbit=20"), "'rate_mbit' is not a grid key"),
                        (("--point", "bottleneck_mbit"), "expected KEY=VALUE"),
                        (("--seed", "3"), "--seed: 3 is not in sweep tiny; allowed: 0")]:
        bad = dry(*extra)
        assert bad.exit_code == 2 and says in bad.output and "Traceback" not in bad.output, bad.output
    assert not (tmp_path / "tiny").exists()


def test_compare_as_files_an_experiments_runs_under_another(tmp_path: Path) -> None:
    """Runs of an experiment that ``compare_as`` another keep their own folders and carry
    the other's name in sweep.json, which the tables group by; a name that is no other
    experiment of the sweep is refused in one line."""
    from testbed.analysis import tables
    from testbed.orchestration.executors import sweep_meta

    data = json.loads(json.dumps(BASE))
    data["experiments"][1]["compare_as"] = "rate"
    runs = sw.expand(sw.load_sweep(_write(tmp_path, data)), tmp_path)
    ramp = [r for r in runs if r.experiment == "ramp"]
    assert ramp and all(r.run_dir.parts[-3] == "ramp" and r.compare_as == "rate" for r in ramp)
    assert sweep_meta(ramp[0])["compare_as"] == "rate"
    # and so it stays where the command line resolves the scenarios and adds --set
    resolved = sw.with_overrides(sw.resolve_scenarios(ramp), {"workload.steps": 3})
    assert all(r.compare_as == "rate" for r in resolved)
    assert sweep_meta(resolved[0])["compare_as"] == "rate"
    assert "compare_as" not in sweep_meta(next(r for r in runs if r.experiment == "rate"))
    # the tables read it (the experiment key of the committed paper-grid runs)
    grid = Path(__file__).resolve().parents[2] / "results" / "runs" / "paper-grid"
    if grid.is_dir():
        t, _steps = tables.load_runs(grid)
        # each model's adaptive runs are filed with its fixed ones (never "-adaptive")
        got = set(t.loc[t["method"] == "netsenseml", "experiment"])
        assert got and all(e.endswith("-star") for e in got), got
        assert "paper-grid/resnet18-star" in got
    for bad in ("ramp", "nothing"):
        data["experiments"][1]["compare_as"] = bad
        with pytest.raises(sw.SweepError, match=r"compare_as: .* names no other experiment"):
            sw.load_sweep(_write(tmp_path, data))
