"""Scenario schema, overrides, trace parsing, timeline expansion and the results writers.

Pure Python: no network is built here (the emulation tests are in test_run*.py).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
import yaml

from testbed.common import files
from testbed.config.scenario import (
    ScenarioError,
    apply_overrides,
    build_params,
    link_names,
    list_scenarios,
    load_scenario,
    validate_scenario,
)
from testbed.config.traces import TraceError, parse_trace, trace_rate_changes
from testbed.orchestration import worker_records
from testbed.orchestration.timeline import Action, Timeline, expand

BASE = {
    "name": "t",
    "topology": {"kind": "star", "n_workers": 2, "n_cross": 1, "rate_mbit": 50},
    "workload": {"model": "mlp", "dataset": "digits", "batch_size": 8, "steps": 3},
    "methods": ["allreduce"],
}


def write(tmp_path: Path, data: dict | str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def with_(path: str, value) -> dict:
    data = json.loads(json.dumps(BASE))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[keys[-1]] = value
    return data


def test_bundled_scenarios_load_and_name_their_links():
    names = [n for n, _ in list_scenarios()]
    assert {"smoke", "star-congestion", "dumbbell-crosstraffic", "trace-replay",
            "leafspine"} <= set(names)
    for name in names:
        scn = load_scenario(name)
        assert scn.name == name
        assert scn.world_size >= 2
        for ev in scn.timeline:
            if hasattr(ev, "link"):
                assert ev.link in link_names(scn.topology)
    smoke = load_scenario("smoke")
    assert smoke.methods == ["allreduce", "netsenseml"]
    assert build_params(smoke.topology)["delay_ms"] is None  # 0/absent -> no netem asked


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (with_("topology.rate_mbit", -5), "topology.rate_mbit: Input should be greater than or equal to 0.01"),
        (with_("topology.n_workers", 0), "topology.n_workers"),
        (with_("topology.colour", "red"), "topology.colour: unknown field"),
        (with_("topology.kind", "ring"), "'star', 'dumbbell', 'leafspine'"),
        (with_("name", "../evil"), "name: invalid name '../evil'"),
        (with_("methods", ["allreduce", "foo"]), "methods[1]"),
        (with_("methods", ["topk:abc"]), "topk:abc"),
        (with_("workload.model", "vgg"), "model 'vgg' unknown; accepted: mlp, resnet18, resnet20, gpt, resnet18-imagenet, vgg16, gpt2-small or package.module:factory"),
        (with_("workload.dataset", "mnist"), "dataset 'mnist' unknown; accepted: digits, synthetic, cifar100-synth, mixture"),
        (with_("workload.model", "gpt"), "dataset 'digits' does not fit model 'gpt'; accepted: text"),
        (with_("workload.model", "nosuchpkg.mod:build"), "module 'nosuchpkg.mod' not found"),
        (with_("workload.time_limit_s", 5), "exactly one of steps or time_limit_s"),
        ({**BASE, "timeline": [{"at_s": 1, "kind": "set_rate", "link": "w7", "rate_mbit": 5}]},
         "unknown link 'w7'; links: w0, w1, x0"),
        ({**BASE, "timeline": [{"at_s": 1, "kind": "cross_start", "id": "a", "src": "x0",
                                "dst": "w9"}]}, "unknown dst host 'w9'"),
        ({**BASE, "timeline": [{"at_s": 1, "kind": "cross_stop", "id": "nope"}]},
         "no earlier cross_start/ramp with id 'nope'"),
        ({**BASE, "timeline": [{"at_s": 1, "kind": "ramp", "id": "r", "src": "x0", "dst": "w1",
                                "start_streams": 10, "max_streams": 5}]}, "max_streams (5)"),
        ({**BASE, "timeline": [{"at_s": -1, "kind": "set_rate", "link": "w0", "rate_mbit": 5}]},
         "timeline[0].at_s"),
        ({**BASE, "workload": {**BASE["workload"], "grads": "recorded"},
          "methods": ["stellatrain", "accordion"]},
         "methods[1]: accordion decides from gradient values"),
    ],
)
def test_bad_scenarios_give_one_line_naming_the_field(tmp_path, data, needle):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, data))
    msg = str(err.value)
    assert msg.startswith("scenario s.yaml: ")
    assert needle in msg
    assert "\n" not in msg


def test_yaml_syntax_error_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ScenarioError, match=r"YAML syntax error at line 3 column 1: expected .,. or .]."):
        load_scenario(write(tmp_path, "name: x\ntopology: [1, 2\n"))
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'; available: .*smoke"):
        load_scenario("nope")


def test_netem_fields_follow_the_kernel_probe(tmp_path):
    from testbed.emulation import kernel

    path = write(tmp_path, with_("topology.delay_ms", 10))
    if kernel.has_netem():
        assert load_scenario(path).topology.delay_ms == 10
    else:
        with pytest.raises(ScenarioError, match=r"topology.delay_ms: .*netem"):
            load_scenario(path)


LAZY_PROBE = """
import sys
from testbed.config import scenario
emulation = lambda: sorted(m for m in sys.modules if m.startswith("testbed.emulation"))
print("import", emulation())
names = [n for n, _ in scenario.list_scenarios()
         if not scenario.load_scenario(n, skip_kernel_checks=True).topology.impairments()]
plain = [scenario.load_scenario(n) for n in names]  # the kernel checks on: none asked
print("validated", len(plain), emulation())
data = plain[0].model_dump(mode="json")
data["topology"]["delay_ms"] = 5
scenario.validate_scenario(data, skip_kernel_checks=True)
print("skipped", emulation())
for _ in range(2):
    try:
        scenario.validate_scenario(data)
    except ValueError:
        pass  # this kernel has no netem: refused, as test_netem_fields_follow_the_kernel_probe says
from testbed.emulation import kernel
print("probed", kernel.qdisc_supported.cache_info().misses)
"""


def test_validating_a_scenario_asks_the_kernel_only_for_netem_fields() -> None:
    """Layers: the scenario's validator imports no emulation code, and runs no kernel probe,
    at import or for a scenario without delay/jitter/loss (or with the kernel checks
    skipped); a scenario with them is probed once per process (issue 51)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0] == "import []", out
    validated, loaded = out[1].split(" ", 2)[1:]
    assert int(validated) > 10 and loaded == "[]", out  # every shipped scenario without netem
    assert out[2] == "skipped []", out
    assert out[3] == "probed 1", out  # validated twice, probed once


def test_congestion_control_follows_the_kernel(tmp_path, monkeypatch):
    """topology.congestion_control: what the kernel allows a namespace, read when the
    scenario is loaded; kept in the dump, never a build() argument; none by default."""
    from testbed.emulation import kernel

    assert load_scenario(write(tmp_path, BASE)).topology.congestion_control is None
    monkeypatch.setattr(kernel, "congestion_controls", lambda: ["reno", "bbr"])
    monkeypatch.setattr(kernel, "available_congestion_controls", lambda: ["reno", "bbr"])
    scn = load_scenario(write(tmp_path, with_("topology.congestion_control", "reno")))
    assert scn.topology.congestion_control == "reno"
    assert scn.model_dump(mode="json")["topology"]["congestion_control"] == "reno"
    assert "congestion_control" not in build_params(scn.topology)
    assert apply_overrides(scn, {"topology.congestion_control": "bbr"}
                           ).topology.congestion_control == "bbr"
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, with_("topology.congestion_control", "cubic")))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("scenario s.yaml: topology.congestion_control: 'cubic' is not "
                          "allowed"), msg
    assert msg.endswith("allowed: reno, bbr (net.ipv4.tcp_allowed_congestion_control)"), msg
    with pytest.raises(ScenarioError, match=r"topology.congestion_control: String should match"):
        load_scenario(write(tmp_path, with_("topology.congestion_control", "Reno; rm")))
    # a run folder's config read elsewhere: its kernel is not this one
    monkeypatch.setattr(kernel, "congestion_controls", lambda: [])
    data = with_("topology.congestion_control", "cubic")
    assert validate_scenario(data, skip_kernel_checks=True).topology.congestion_control == "cubic"


def test_congestion_control_is_for_emulated_hosts_only():
    data = {**BASE, "topology": {"kind": "hosts", "rate_mbit": 100, "congestion_control": "reno",
                                 "machines": [{"address": "10.9.0.1", "interface": "eth0"},
                                              {"address": "10.9.0.2", "interface": "eth0"}]}}
    with pytest.raises(ValueError, match=r"topology.congestion_control: real hosts keep their "
                                         r"own TCP"):
        validate_scenario(data, skip_kernel_checks=True)


def test_overrides_revalidate_and_reach_nested_fields():
    scn = load_scenario("star-congestion")
    new = apply_overrides(scn, {"topology.rate_mbit": 20, "timeline.0.max_streams": 30,
                                "workload.args.width": 64, "workload.steps": 7})
    assert new.topology.rate_mbit == 20
    assert new.timeline[0].levels() == [1, 10, 20, 30]
    assert new.workload.args["width"] == 64
    assert new.workload.steps == 7 and new.workload.time_limit_s is None
    assert scn.topology.rate_mbit == 100  # the original is untouched
    with pytest.raises(ScenarioError, match="topology.rate_mbit"):
        apply_overrides(scn, {"topology.rate_mbit": 0})
    with pytest.raises(ScenarioError, match="no field 'nosuch'"):
        apply_overrides(scn, {"nosuch.x": 1})
    with pytest.raises(ScenarioError, match="unknown link"):
        apply_overrides(scn, {"timeline.0.kind": "set_rate", "timeline.0": {
            "kind": "set_rate", "at_s": 1, "link": "bottleneck", "rate_mbit": 3}})


def test_ramp_expands_to_one_client_per_level_and_a_stop():
    scn = load_scenario("star-congestion")
    actions, plans = expand(scn.timeline)
    starts = [a for a in actions if a.kind == "cross_start"]
    assert [a.at for a in starts] == [10, 20, 30, 40, 50, 60]
    assert plans[0].streams == [1, 9, 10, 10, 10, 10]  # cumulative 1, 10, 20, ... 50
    assert sum(plans[0].streams) == 50
    assert actions[-1].kind == "cross_stop" and actions[-1].at == 70


def test_csv_and_mahimahi_traces(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time,rate\n0,10\n2,5\n4,0\n")
    rows = parse_trace(p, "csv")
    assert rows == [(0.0, 10.0), (2.0, 5.0), (4.0, 0.0)]
    changes = trace_rate_changes(rows, scale=2, min_mbit=0.5)
    assert changes == [(0.0, 20.0), (2.0, 10.0), (4.0, 0.5)]
    looped = trace_rate_changes(rows, duration_s=13)  # period 6 s
    assert [t for t, _ in looped] == [0, 2, 4, 6, 8, 10, 12]

    m = tmp_path / "t.mahi"
    # 1000 packets in the first second, 250 in the second: 12 and 3 Mbit/s
    m.write_text("\n".join(["0"] * 1000 + ["1500"] * 250) + "\n")
    rates = parse_trace(m, "mahimahi", bin_ms=1000)
    assert rates == [(0.0, 12.0), (1.0, 3.0)]
    half = parse_trace(m, "mahimahi", bin_ms=500)
    assert [r for _, r in half] == [24.0, 0.0, 0.0, 6.0]

    bad = tmp_path / "bad.csv"
    bad.write_text("0,10\n1,x\n")
    with pytest.raises(TraceError, match="line 2"):
        parse_trace(bad, "csv")
    back = tmp_path / "back.mahi"
    back.write_text("10\n5\n")
    with pytest.raises(TraceError, match="line 2"):
        parse_trace(back, "mahimahi")


def test_trace_event_resolves_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "a.csv").write_text("0,5\n1,7\n")
    data = {**BASE, "timeline": [{"at_s": 2, "kind": "trace", "link": "w1", "file": "tr/a.csv"}]}
    scn = load_scenario(write(tmp_path, data))
    assert Path(scn.timeline[0].file).is_absolute()
    actions, _ = expand(scn.timeline)
    assert [(a.at, a.value) for a in actions] == [(2.0, 5.0), (3.0, 7.0)]
    data["timeline"][0]["file"] = "tr/missing.csv"
    with pytest.raises(ScenarioError, match="trace file not found"):
        load_scenario(write(tmp_path, data))
    (tmp_path / "tr" / "bad.csv").write_text("0,5\n1,-3\n")
    data["timeline"][0]["file"] = "tr/bad.csv"
    with pytest.raises(ScenarioError, match="bad.csv line 2: negative"):
        load_scenario(write(tmp_path, data))


def test_timeline_thread_applies_in_order_and_records_lag():
    applied: list[tuple[float, str]] = []

    def apply(a: Action) -> str:
        applied.append((time.time(), a.target))
        if a.target == "boom":
            raise RuntimeError("tc said no")
        return "done"

    acts = [Action(0.05, "set_rate", "a", 1.0), Action(0.15, "set_rate", "boom", 2.0),
            Action(0.25, "set_rate", "c", 3.0), Action(30.0, "set_rate", "late", 4.0)]
    tl = Timeline(acts, apply)
    t0 = time.time()
    tl.start(t0)
    time.sleep(0.6)
    tl.stop()
    recs = tl.snapshot()
    assert [r.target for r in recs] == ["a", "boom", "c"]  # "late" never ran: stopped
    for r in recs:
        assert r.t_applied >= r.t_scheduled - 0.01
    assert recs[1].detail.startswith("error: RuntimeError")
    assert tl.error is not None and "tc said no" in tl.error
    assert [t for t, _ in applied] == sorted(t for t, _ in applied)


def _records(rank: int, walls: list[float], samples: int = 16) -> list[dict]:
    recs: list[dict] = [{"kind": "start", "rank": rank, "wall": walls[0] - 1}]
    for i, w in enumerate(walls, start=1):
        recs.append({"kind": "step", "t": w - walls[0], "wall": w, "step": i,
                     "samples": samples, "comm_s": 0.1 * i, "bytes_sent": 1000,
                     "kept_ratio": 1.0 / i, "level": "none", "loss": 1.0, "extra_stat": i})
    recs.append({"kind": "eval", "t": 1.5, "wall": walls[1] + 0.01, "step": 2, "accuracy": 0.5})
    recs.append({"kind": "eval", "t": 3.5, "wall": walls[-1] + 0.01, "step": len(walls),
                 "accuracy": 0.9})
    recs.append({"kind": "summary", "status": "ok", "final_accuracy": 0.9, "train_time_s": 4})
    return recs


def test_metrics_and_steps_csv(tmp_path):
    walls = [100.0, 101.0, 102.0, 103.0, 104.0]
    recs = {0: _records(0, walls), 1: _records(1, [w + 0.01 for w in walls])}
    m = worker_records.metrics(recs, target_accuracy=0.8)
    # steps 2..5 of rank 0: 4 x 16 global samples over 4 s (wall 100 -> 104)
    assert m["throughput_samples_per_s"] == pytest.approx(16.0)
    # the end of step 5 on the training clock, after which the 0.9 evaluation ran (the
    # evaluation's own time is not counted: testbed.common.metrics)
    assert m["time_to_accuracy_s"] == 4.0 and m["final_accuracy"] == 0.9
    assert m["bytes_sent_total"] == 2 * 5 * 1000
    assert worker_records.metrics(recs, target_accuracy=0.95)["time_to_accuracy_s"] is None
    rows, cols = worker_records.steps_csv_rows(recs, launch_wall=99.0)
    files.write_csv(tmp_path / "steps.csv", cols, rows)
    with open(tmp_path / "steps.csv") as fh:
        got = list(csv.DictReader(fh))
    assert len(got) == 10 and "extra_stat" in got[0] and "t_worker" in got[0]
    assert float(got[0]["t"]) == pytest.approx(1.0)  # wall 100 - launch 99
    assert {r["accuracy"] for r in got if r["step"] == "2"} == {"0.5"}
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temp files


def test_jsonl_reader_skips_a_torn_last_line(tmp_path):
    p = tmp_path / "rank0.jsonl"
    p.write_text('{"kind": "step", "step": 1}\n{"kind": "st')
    assert files.read_jsonl(p) == [{"kind": "step", "step": 1}]
    assert worker_records.last_step(p) == {"kind": "step", "step": 1}
