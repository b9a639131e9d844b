"""The method's path from where it enters (the scenario, the command line, ``--arm``, the
worker's argv) to the records: the spec is parsed there once and carried; no layer below
parses the text again or compares a method's name (issue 51, part 1)."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from netsenseml import methods
from testbed.config.scenario import ScenarioError, load_scenario, validate_scenario

REPO = Path(__file__).resolve().parents[2]


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a method parsed again below its entry: {args!r}")

    for name in ("parse", "check_findable", "load"):
        monkeypatch.setattr(methods, name, refuse)


def test_the_run_path_asks_the_spec_and_never_parses_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the scenario (where the methods enter) to the worker's argv and environment,
    the dilation's host timing's codecs and an A/B arm: every layer takes the spec."""
    from testbed.orchestration import ab, dilation
    from testbed.orchestration.workers import job_env, worker_argv

    scn = load_scenario("smoke")
    arm = ab.parse_arm("topk:0.01@HEAD")
    _no_parse(monkeypatch)
    for text in scn.methods:
        spec = scn.method_spec(text)
        assert spec is scn.method_spec(text) and str(spec) == text  # the scenario's own
        argv = worker_argv(scn, spec, 0, tmp_path)
        assert argv[argv.index("--method") + 1] == text
        assert job_env(scn, spec, 0, tmp_path, 0, "run", 1.0)["NETSENSE_METHOD"] == text
        assert dilation.codec_specs(spec) == [str(c) for c in spec.codecs()]
        assert dilation.choose(scn, spec) == (1.0, {"mode": "native"})
    assert arm.method == "topk:0.01" and arm.spec.collective == "allgather"


def test_the_scenario_keeps_its_specs_through_pickling_and_copies() -> None:
    """A staged (Ray) run gets the scenario pickled; an override copies it."""
    scn = load_scenario("smoke")
    for other in (pickle.loads(pickle.dumps(scn)), scn.model_copy()):
        assert {m: str(other.method_spec(m)) for m in other.methods} == {m: m for m in scn.methods}
    assert scn.method_spec("fp16").collective == "allreduce"  # not listed: checked here


def test_the_worker_parses_its_method_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from workloads import registry
    from workloads.train import parse_args, sgd_momentum

    args = parse_args(["--method", "dgc:0.01", "--steps", "1"])
    assert args.method == "dgc:0.01" and args.spec.name == "dgc"  # the record keeps the text
    _no_parse(monkeypatch)
    entry = registry.model_entry("mlp")
    assert sgd_momentum(entry, args.spec, error_feedback=True) == 0.0  # momentum correction
    assert sgd_momentum(entry, args.spec, error_feedback=False) == entry.momentum


@pytest.mark.parametrize(("methods_", "needle"), [
    (["allreduce", "topk:2"], "methods[1]: invalid method 'topk:2': R must satisfy 0<R<=1"),
    (["fp17"], "methods[0]: unknown method 'fp17'; accepted: allreduce (alias none), fp16"),
])
def test_a_bad_method_is_one_line_naming_the_field_and_the_forms(
        methods_: list[str], needle: str) -> None:
    data = load_scenario("smoke").model_dump(mode="json", exclude_none=True)
    with pytest.raises(ScenarioError) as err:
        validate_scenario({**data, "methods": methods_})
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and "package.module:Name" in msg


def test_a_bad_worker_method_is_one_line_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    from workloads.train import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--method", "powersgd:0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --method: invalid method 'powersgd:0': RANK must satisfy integer>=1" in err
    assert "accepted: allreduce" in err


def test_a_bad_arm_is_one_line_naming_the_arm() -> None:
    from testbed.orchestration import ab

    with pytest.raises(ab.ABError, match=r"^--arm 'topk@HEAD': invalid method 'topk': topk "
                                         r"needs an argument.*accepted: allreduce"):
        ab.parse_arm("topk@HEAD")


#: The modules of the run path, from the scenario and the command line to the worker's
#: records: none compares a method's name with a method name.
RUN_PATH = ("netsenseml/hooks.py", "netsenseml/state.py", "netsenseml/payload.py",
            "workloads/train.py", "testbed/config/scenario.py", "testbed/orchestration",
            "testbed/cli/app.py", "testbed/cli/profile.py")
NAMES = "|".join(re.escape(n) for n in (*methods.names(), "none"))
SWITCH = re.compile(rf"""((?<!mode)\.name|method|\bm)\s*[!=]=\s*["']({NAMES})["']|"""
                    rf"""startswith\(["']({NAMES})\b""")


def test_no_layer_of_the_run_path_switches_on_a_method_name() -> None:
    files = [p for part in RUN_PATH for p in
             (sorted((REPO / part).glob("*.py")) if (REPO / part).is_dir() else [REPO / part])]
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) if SWITCH.search(line)]
    assert found == []
