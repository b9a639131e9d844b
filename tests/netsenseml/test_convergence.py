"""The convergence prior: table format, loader, the scenario field and the worker's option."""

import json
import math
from pathlib import Path

import pytest

from netsenseml import convergence, methods
from netsenseml.policy import Decision, NetSensePolicy


def table(steps: dict[str, list], **extra) -> dict:
    levels = {k: {"method": str(convergence.level_method(k)), "steps": v} for k, v in steps.items()}
    return {"format": convergence.FORMAT, "workload": {"eval_every": 20}, "max_steps": 1500,
            "levels": levels, **extra}


EVAL = table({"none": [220, 220, 220], "fp16": [220, 220, 240], "int8": [220, 220, 220],
              "topk:0.1": [220, 220, 220], "topk:0.01": [300, 300, 300],
              "topk:0.001": [440, None, 420]})


def test_factors_are_mean_steps_over_the_base_and_nulls_count_as_the_cap():
    p = convergence.from_table(EVAL)
    assert p.factor("none") == 1.0
    assert p.factor("fp16") == pytest.approx(680 / 3 / 220)
    assert p.factor("topk", 0.1) == pytest.approx(1.0)
    assert p.factor("topk", 0.01) == pytest.approx(300 / 220)
    assert p.factor("topk", 0.001) == pytest.approx((440 + 1500 + 420) / 3 / 220)
    # resolution: one evaluation interval over the base (20 / 220), or the seeds' spread
    assert p.resolution >= 20 / 220


def test_topk_factor_is_monotone_interpolated_and_extended_with_the_steepest_slope():
    p = convergence.from_steps({"none": 100, "topk:0.1": 130, "topk:0.01": 120, "topk:0.001": 200})
    # keeping more never costs more: 0.01 is lifted to 0.1's 1.3
    assert p.factor("topk", 0.01) == pytest.approx(1.3)
    r = math.sqrt(0.01 * 0.001)  # half a decade between 0.01 and 0.001
    assert p.factor("topk", r) == pytest.approx(1.3 + 0.5 * 0.7)
    assert p.factor("topk", 0.5) == pytest.approx(1.3)  # flat above the largest ratio
    assert p.factor("topk", 0.0001) == pytest.approx(2.0 + 0.7)  # steepest slope: 0.7/decade
    rs = [10 ** (-i / 10) for i in range(1, 50)]
    fs = [p.factor("topk", x) for x in rs]
    assert all(b >= a for a, b in zip(fs, fs[1:], strict=False))


def test_default_prior_is_stated_and_more_conservative_than_the_measured_tables():
    d = convergence.DEFAULT_PRIOR
    assert "default" in d.source
    # the repository's two measured MLP workloads (benchmarks/convergence.py): width 2048
    # at 0.95 and width 512 at 0.85
    for measured in (convergence.from_steps({"none": 240, "topk:0.1": 273, "topk:0.01": 373,
                                             "topk:0.001": 453}),
                     convergence.from_steps({"none": 220, "topk:0.1": 220, "topk:0.01": 300})):
        for r in (0.1, 0.01, 0.001):
            assert d.factor("topk", r) >= measured.factor("topk", r)
    assert d.factor("int8") > 1.0 and d.factor("fp16") == 1.0
    assert NetSensePolicy().prior is d


def test_policy_uses_the_table_it_is_given(tmp_path: Path):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(EVAL))
    policy = NetSensePolicy(prior=str(path))
    assert policy.prior.source == str(path)
    assert policy.steps_factor(Decision("topk", 0.01)) == pytest.approx(300 / 220)
    assert policy.steps_factor(Decision("int8")) == pytest.approx(1.0)
    assert NetSensePolicy(prior={"none": 200, "int8": 260, "topk:0.1": 300,
                                 "topk:0.01": 400}).steps_factor(Decision("int8")) == pytest.approx(1.3)


@pytest.mark.parametrize(("data", "needle"), [
    ({"format": "other/2", "levels": {}}, "format"),
    ({"levels": {"fp16": {"steps": [1]}}}, "'none'"),
    ({"levels": {"none": {"steps": []}}}, "levels.none.steps"),
    ({"levels": {"none": {"steps": [None]}}}, "max_steps"),
    ({"levels": {"none": {"steps": [-3]}}}, "levels.none.steps"),
    ({"levels": {"none": {"steps": [100]}, "powersgd:4": {"steps": [100]}}}, "not a ladder level"),
])
def test_bad_tables_are_one_line_naming_the_field(data, needle, tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(convergence.ConvergenceError) as err:
        convergence.load(path)
    assert needle in str(err.value) and "\n" not in str(err.value)
    path.write_text("{not json")
    with pytest.raises(convergence.ConvergenceError, match="not JSON"):
        convergence.load(path)
    with pytest.raises(convergence.ConvergenceError, match="cannot read"):
        convergence.load(tmp_path / "missing.json")


def test_scenario_field_resolves_next_to_the_file_and_reaches_only_netsenseml(tmp_path: Path):
    from testbed.config.scenario import ScenarioError, load_scenario
    from testbed.orchestration.workers import worker_argv

    (tmp_path / "conv.json").write_text(json.dumps(EVAL))
    src = Path("testbed/scenarios/smoke.yaml").read_text()
    (tmp_path / "s.yaml").write_text(src + "convergence: conv.json\n")
    scn = load_scenario(tmp_path / "s.yaml")
    assert scn.convergence == str((tmp_path / "conv.json").resolve())
    argv = worker_argv(scn, methods.parse("netsenseml"), 0, tmp_path)
    assert argv[argv.index("--convergence") + 1] == scn.convergence
    assert "--convergence" not in worker_argv(scn, methods.parse("allreduce"), 0, tmp_path)
    (tmp_path / "bad.yaml").write_text(src + "convergence: nothere.json\n")
    with pytest.raises(ScenarioError, match="convergence.*cannot read") as err:
        load_scenario(tmp_path / "bad.yaml")
    assert "\n" not in str(err.value)


def test_calibrate_levels_come_from_the_registry_ladder():
    levels = convergence.calibrate_levels()
    assert levels[0] == "none" and "fp16" in levels and "int8" in levels
    assert [k for k in levels if k.startswith("topk:")] == ["topk:0.1", "topk:0.01", "topk:0.001"]
    for k in levels:
        assert convergence.level_method(k).level_key == k
        assert convergence.level_key(str(convergence.level_method(k))) == k
