"""Values that pass a type check but break their consumer are
refused before anything is built, with one line naming the field; a run whose timeline did
not happen in full is not ``ok``; the timeline thread never prints a traceback."""

from __future__ import annotations

import time

import pytest

from testbed.config.scenario import load_scenario
from testbed.orchestration.timeline import Action, Timeline
from tests.cli.invoke import netsense

LONG = "a" * 300
# (--set item, text the one line must contain)
CASES = {
    "unknown-worker-arg": ("workload.args.bogus=1", "workload.args: bogus: unknown worker option"),
    "orchestrator-arg": ("workload.args.steps=3", "'steps' is set by workload.steps"),
    "arg-type": ("workload.args.width=abc", "'width' must be an integer"),
    "arg-negative": ("workload.args.context=-4", "'context' must be in [1,"),
    "flag-with-value": ("workload.args.no_error_feedback=3", "is a switch"),
    "knob-model-lacks": ("workload.args.layers=2", "model mlp has no knob layers"),
    "knob-inf": ("workload.args.model_args=width=1e400", "knob width=inf out of range"),
    "stop-needs-eval": ("workload.eval_every=null", None),  # placeholder, replaced below
    "event-after-end": ("timeline.0.at_s=500", "timeline[0] (set_rate): at_s 500 s is not before"),
    "event-far-future": ("timeline.0.at_s=1.0e300", "timeline[0].at_s: Input should be less"),
    "rate-inf": ("topology.rate_mbit=.inf", "topology.rate_mbit: Input should be a finite"),
    "rate-nan": ("timeline.0.rate_mbit=.nan", "timeline[0].rate_mbit: Input should be a finite"),
    "rate-tiny": ("timeline.0.rate_mbit=0.000001", "timeline[0].rate_mbit: Input should be greater"),
    "name-too-long": (f"name={LONG}", "name: String should have at most 128"),
    "seed-negative": ("seeds=[-1]", "seeds[0]: Input should be greater than or equal to 0"),
    "seed-too-big": ("seeds=[99999999999]", "seeds[0]: Input should be less"),
    "time-limit-inf": ("workload.time_limit_s=.inf", "workload.time_limit_s: Input should be a"),
    "time-limit-huge": ("workload.time_limit_s=1.0e9", "workload.time_limit_s: Input should be"),
    "probe-fraction": ("probe_s=0.5", "probe_s: Input should be a multiple of 1"),
    "data-dir-missing": ("workload.data_dir=/nonexistent/x", "data_dir: no such folder"),
    "queue-zero": ("topology.queue_pkts=0", "topology.queue_pkts"),
    "delay-huge": ("topology.delay_ms=1.0e12", "topology.delay_ms: Input should be less"),
    "method-too-long": (f"methods=[topk:0.1{'0' * 300}]", "longer than 200 characters"),
}
del CASES["stop-needs-eval"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_set_values_refused_with_one_line(tmp_path, monkeypatch, case):
    item, needle = CASES[case]
    res = netsense(["run", "smoke", "--set", item, "--results", str(tmp_path / "res")], tmp_path,
                   monkeypatch)
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], (case, res.stderr)
    assert not (tmp_path / "res").exists()


def _scenario(tmp_path, timeline: str, extra: str = "") -> str:
    p = tmp_path / "s.yaml"
    p.write_text(f"""name: s
topology: {{kind: star, n_workers: 2, n_cross: 1, rate_mbit: 50}}
workload: {{model: mlp, dataset: digits, batch_size: 8, time_limit_s: 20{extra}}}
methods: [allreduce]
timeline:
{timeline}
""")
    return str(p)


EVENT_CASES = {
    "stop-before-start": (
        "  - {at_s: 5, kind: cross_start, id: f, src: x0, dst: w1}\n"
        "  - {at_s: 2, kind: cross_stop, id: f}",
        "timeline[1] (cross_stop).at_s: 2 s is before 'f' has started (cross_start at 5 s)"),
    "stop-mid-ramp": (
        "  - {at_s: 1, kind: ramp, id: r, src: x0, dst: w1, max_streams: 30, every_s: 4}\n"
        "  - {at_s: 3, kind: cross_stop, id: r}",
        "before 'r' has started (its last level at 13 s)"),
    "ramp-past-end": (
        "  - {at_s: 1, kind: ramp, id: r, src: x0, dst: w1, max_streams: 50, every_s: 5}",
        "timeline[0] (ramp): last level 26 s is not before the run's end"),
    "ramp-hold-past-end": (
        "  - {at_s: 1, kind: ramp, id: r, src: x0, dst: w1, max_streams: 10, every_s: 5, "
        "hold_s: 30}", "stop (hold_s) 36 s is not before"),
    "streams-over-iperf3": (
        "  - {at_s: 1, kind: cross_start, id: f, src: x0, dst: w1, streams: 129}",
        "timeline[0].streams: Input should be less than or equal to 128"),
    "bitrate-huge": (
        "  - {at_s: 1, kind: cross_start, id: f, src: x0, dst: w1, bitrate_mbit: 1.0e9}",
        "timeline[0].bitrate_mbit: Input should be less"),
    "too-many-flows": (
        "  - {at_s: 1, kind: ramp, id: r, src: x0, dst: w1, max_streams: 300, step_streams: 1, "
        "every_s: 0.01}", "timeline: 300 iperf3 clients"),
    "id-too-long": (
        f"  - {{at_s: 1, kind: cross_start, id: {LONG}, src: x0, dst: w1}}",
        "timeline[0].id: String should have at most 64"),
}


@pytest.mark.parametrize("case", sorted(EVENT_CASES))
def test_timeline_values_refused(tmp_path, monkeypatch, case):
    timeline, needle = EVENT_CASES[case]
    res = netsense(["run", _scenario(tmp_path, timeline), "--results", str(tmp_path / "res")],
                   tmp_path, monkeypatch)
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], (case, res.stderr)
    assert not (tmp_path / "res").exists()


def test_stop_at_target_needs_its_inputs(tmp_path):
    from testbed.config.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="args.stop_at_target needs"):
        load_scenario(_scenario(tmp_path, "  []", ", args: {stop_at_target: true}"))


def test_timeline_thread_records_errors_and_never_raises(capfd):
    """An action whose apply raises anything (even BaseException) is recorded as the
    timeline's error; nothing reaches stderr."""
    def apply(action: Action) -> str:
        raise SystemExit("boom")

    tl = Timeline([Action(0.0, "set_rate", "w0", 1.0, source="timeline[0] set_rate")], apply)
    tl.start(time.time())
    tl.stop()
    assert tl.error and "boom" in tl.error
    assert "Traceback" not in capfd.readouterr().err


def test_batch_larger_than_a_shard_refused(tmp_path, monkeypatch):
    res = netsense(["run", "smoke", "--set", "workload.batch_size=800", "--results",
                    str(tmp_path / "res")], tmp_path, monkeypatch)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: scenario smoke with overrides: workload.batch_size: 800 exceeds each rank's "
        "shard of 719 digits samples (2 workers)"], res.stderr


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_cli_seed_bounds(tmp_path, monkeypatch, seed):
    res = netsense(["run", "smoke", "--seed", seed, "--results", str(tmp_path / "res")], tmp_path,
                   monkeypatch)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"error: --seed: {seed} is not in [0, 4294967295] (numpy seeds are 32-bit)"]
