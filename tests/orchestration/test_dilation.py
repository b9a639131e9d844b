"""Time dilation's arithmetic (``testbed.orchestration.dilation``) and where the run applies
it: rates divided by k, times multiplied by k, and the records brought back to virtual time
(steps.csv, events.csv, bottleneck.csv, the cross traffic's reports); the factor ``auto``
picks; the overrun count of ``testbed.common.metrics``. Torch-free, no root."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from netsenseml import accelerator, methods
from testbed.common import metrics
from testbed.config import factor, faithful
from testbed.config.events import Action
from testbed.config.scenario import apply_overrides, load_scenario
from testbed.emulation.bottleneck import BottleneckSampler, LinkEnd
from testbed.orchestration import dilation, worker_records
from testbed.orchestration.timeline import Timeline


def test_rates_are_divided_and_nothing_else() -> None:
    params = {"bottleneck_mbit": 10000.0, "access_mbit": 100000, "queue_pkts": 100,
              "n_left": 1, "delay_ms": 0.0, "flag": True}
    out = dilation.topology_params(params, 40)
    assert out["bottleneck_mbit"] == 250 and out["access_mbit"] == 2500
    assert {k: out[k] for k in ("queue_pkts", "n_left", "delay_ms", "flag")} == \
        {"queue_pkts": 100, "n_left": 1, "delay_ms": 0.0, "flag": True}
    assert dilation.topology_params(params, 1) is params


def test_tcp_min_rto_is_dilated_up_to_the_kernels_maximum() -> None:
    assert dilation.rto_min_ms(1) == 200 and dilation.rto_min_ms(40) == 8000
    assert dilation.rto_min_ms(5000) == dilation.RTO_MAX_MS


def test_cross_traffic_reports_come_back_in_virtual_units() -> None:
    real = [{"id": "c1", "achieved_mbit": 100.0, "received_mbit": 90.0, "seconds": 40.0,
             "started_t": 8.0, "intervals": [(0.0, 1.0, 100.0)],
             "received_intervals": [(0.0, 1.0, 90.0)]}]
    v = dilation.virtual_reports(real, 4)[0]
    assert (v["achieved_mbit"], v["received_mbit"], v["seconds"], v["started_t"]) == \
        (400.0, 360.0, 10.0, 2.0)
    assert v["intervals"] == [(0.0, 0.25, 400.0)]
    assert v["received_intervals"] == [(0.0, 0.25, 360.0)]
    assert real[0]["achieved_mbit"] == 100.0  # the input is left as it was


def test_timeline_waits_k_times_longer_and_records_virtual_time() -> None:
    applied: list[float] = []
    t0 = time.time()
    tl = Timeline([Action(0.02, "set_rate", "bottleneck", 500.0)],
                  lambda a: applied.append(time.time() - t0) or "ok", dilation=10)
    tl.start(t0)
    deadline = time.time() + 5
    while tl.pending and time.time() < deadline:
        time.sleep(0.01)
    assert applied and applied[0] >= 0.2  # 0.02 virtual s at k = 10
    rec = tl.snapshot()[0]
    assert rec.t_scheduled == pytest.approx(0.02, abs=1e-3)
    assert 0.02 <= rec.t_applied < 0.02 + 0.05
    assert rec.value == 500.0  # the scenario's (virtual) rate


def test_steps_csv_time_is_virtual() -> None:
    recs = {0: [{"kind": "step", "step": 1, "t": 0.001, "wall": 1000.0 + 4.0, "samples": 8,
                 "compute_s": 0.0005, "comm_s": 0.0005, "step_s": 0.001},
                {"kind": "step", "step": 2, "t": 0.002, "wall": 1000.0 + 8.0, "samples": 8,
                 "compute_s": 0.0005, "comm_s": 0.0005, "step_s": 0.001}]}
    rows = worker_records.steps_csv_rows(recs, 1000.0, dilation=4).rows
    assert [r["t"] for r in rows] == [1.0, 2.0]
    assert [r["t_worker"] for r in rows] == [0.001, 0.002]  # the worker's own, already virtual


def test_bottleneck_rows_are_virtual(tmp_path: Path) -> None:
    s = BottleneckSampler([LinkEnd("bottleneck", "eth0", None, "s1")], lambda link: 250.0,
                          tmp_path / "b.csv", origin_wall=100.0, dilation=40)
    s._row(s.ends[0], 104.0, {"bytes": 0, "drops": 0, "overlimits": 0})
    s._row(s.ends[0], 108.0, {"bytes": 125_000_000, "drops": 4, "overlimits": 8})
    row = s.rows[0]
    assert row["t"] == pytest.approx(0.2)
    assert row["configured_mbit"] == 10000.0
    assert row["delivered_mbit"] == pytest.approx(250.0 * 40)
    assert row["drops_per_s"] == pytest.approx(40.0)


def test_faithful_range_is_judged_on_the_real_rate() -> None:
    scn = load_scenario("accel-static").model_dump(mode="json")
    limit = faithful.faithful_mbit()
    assert faithful.warning(scn, dilation=1) is not None  # 10 Gbit/s real: CPU-bound
    assert faithful.warning(scn, dilation=10000 / limit) is None
    assert "virtual" in faithful.warning(scn, dilation=2)


def test_network_factor_brings_the_training_path_into_the_faithful_range() -> None:
    scn = load_scenario("accel-static")
    k = dilation.network_factor(scn)
    assert 10000 / k <= faithful.faithful_mbit() < 10000 / (k * 0.9)


def test_least_factor_fits_every_part_with_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factor, "PER_STEP_BOOKKEEPING_S", 0.0)
    timing = accelerator.Timing(0.001, 0.002, 0.0005, {"topk": 0.0001})
    real = {"forward_s": 0.01, "backward_s": 0.01, "optimizer_s": 0.001, "between_s": 0.002,
            "elements": 250_000, "codec_s": {"topk": 0.01}}  # 1 MB of gradient
    # between steps + forward 12 ms in a 1 ms slot: 12x; optimizer + between + forward
    # 13 / 1.5 ms = 8.7x; backward + codec 20 / 2.1 ms = 9.5x
    assert factor.least_factor(timing, real, margin=1.5) == 18
    assert factor.least_factor(timing, real, margin=1.0) == 12
    # a slow optimizer shares its slot with the forward: (100 + 2 + 10) / 1.5 ms = 74.7x,
    # not the 200x it would need alone
    slow = dict(real, optimizer_s=0.1)
    assert factor.least_factor(timing, slow, margin=1.0) == 75
    # no optimizer slot: its real work is the forward's slot's to absorb
    free = accelerator.Timing(0.001, 0.002, 0.0)
    assert factor.least_factor(free, real, margin=1.0) == 13


def test_a_native_run_is_k_1_and_a_given_factor_is_kept() -> None:
    scn = load_scenario("xover-static")
    assert dilation.choose(scn, methods.parse("fp16")) == (1.0, {"mode": "native"})
    paced = apply_overrides(scn, {"accelerator": {"step_ms": 20, "dilation": 3}})
    k, facts = dilation.choose(paced, methods.parse("fp16"))
    assert k == 3 and facts["mode"] == "paced" and facts["dilation_source"] == "given"
    assert facts["timing"]["forward_s"] == pytest.approx(0.006)


def test_auto_measures_a_configuration_once_per_host_and_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host timing's measurement is reused by a later process (the in-process cache emptied
    stands for one) while host and code stay, and taken again when the code changes."""
    monkeypatch.setenv(dilation.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(dilation, "_cache", {})
    # the host's load moving between the calls (other tests beside this one) is a reason to
    # measure again that this test is not about
    monkeypatch.setattr(dilation, "RECALIBRATE_PCT", 100.0)
    measured: list[dict] = []  # what each call of the host timing returned
    real_measure = dilation.measure
    monkeypatch.setattr(dilation, "measure",
                        lambda *a: measured.append(real_measure(*a)) or measured[-1])
    scn = load_scenario("accel-static")  # dilation: auto, 2 workers of the small MLP
    k1, first = dilation.choose(scn, methods.parse("fp16"))
    assert first["host_timing_s"] > 0 and first["host_timing_cached"] is None and len(measured) == 1
    assert len(list(tmp_path.glob("*.json"))) == 1
    monkeypatch.setattr(dilation, "_cache", {})  # a new process
    k2, again = dilation.choose(scn, methods.parse("fp16"))
    assert again["host_timing_s"] == 0 and again["host_timing_cached"] and k2 == k1
    assert again["host_real_s"] == first["host_real_s"] and len(measured) == 1
    monkeypatch.setattr(dilation, "_cache", {})
    monkeypatch.setattr(dilation, "code_id", lambda: "other code")
    # measured again: the host timing is called once more (its real run is the first call's;
    # a stand-in returns that measurement, so this test runs the real host timing once)
    monkeypatch.setattr(dilation, "measure", lambda *a: measured.append(measured[0]) or
                        {**measured[0], "again": True})
    _, changed = dilation.choose(scn, methods.parse("fp16"))
    assert changed["host_timing_cached"] is None and len(measured) == 2
    assert changed["host_real_s"].get("again") is True  # not the cached measurement


def test_payload_mode_needs_no_host_timing() -> None:
    scn = apply_overrides(load_scenario("paper-resnet18-star"), {"workload.grads": "payload"})
    k, facts = dilation.choose(scn, methods.parse("topk:0.01"))
    assert facts["host_timing_s"] == 0 and facts["host_rule"] == "payload" and "host_real_s" not in facts
    # the collectives' host cost against a 20 ms step (factor.collective_need), not the
    # host's codec work (recorded: 150-230)
    assert 1 <= k < 40


def test_payload_factor_follows_what_sets_the_step() -> None:
    """Where the network sets the step the host's lateness is a small share of it and k
    stays near 1 (real rates at the virtual ones); where compute sets it, the work must fit
    the compute slot; auto and the estimate take the same k from one rule."""
    from testbed.config import estimate

    def k_of(rate: int, method: str) -> tuple[float, float]:
        scn = apply_overrides(load_scenario("paper-resnet18-star"),
                              {"workload.grads": "payload", "topology.rate_mbit": rate})
        return dilation.choose(scn, method)[0], estimate.estimate(scn, method)["k"]

    slow, fast = k_of(200, "allreduce"), k_of(200, "topk:0.001")
    assert slow[0] == slow[1] and fast[0] == fast[1]
    assert slow[0] < 1.5 < fast[0]  # 3 s of transfer a step against ~25 ms
    timing = accelerator.Timing(forward_s=0.01, backward_s=0.02, optimizer_s=0.0)
    alone = factor.payload_need(timing, 11_000_000, 8, 2, 2.5)
    assert factor.payload_need(timing, 11_000_000, 8, 2, 2.5, max_overrun=0.01) == pytest.approx(
        alone / 1.01)
    assert factor.payload_need(timing, 11_000_000, 8, 2, 2.5, transfer_s=3.0, max_overrun=0.01) < alone / 2
    # the ring's closed form: an allreduce sends 2 (n-1)/n of the payload, all-gather n-1
    assert factor.transfer_s(1_000_000, 8, 1000, 1.0, "allreduce") == pytest.approx(
        2 * 7 / 8 * 4e6 * 8 / 1e9)
    assert factor.transfer_s(1_000_000, 8, 1000, 0.02, "allgather") == pytest.approx(
        7 * 0.02 * 4e6 * 8 / 1e9)


def test_an_all_gather_keeps_its_real_rate_within_the_gather_limit() -> None:
    """In payload mode an all-gather's fastest link runs at most GATHER_REAL_MBIT real;
    an allreduce at the same rate is not held back by it."""
    from testbed.config import estimate

    scn = apply_overrides(load_scenario("paper-gpt2-star"),
                          {"workload.grads": "payload", "topology.rate_mbit": 1000,
                           "topology.n_workers": 8})
    k_gather, k_reduce = dilation.choose(scn, "int8")[0], dilation.choose(scn, "allreduce")[0]
    assert 1000 / k_gather <= factor.GATHER_REAL_MBIT < 1000 / k_reduce
    assert estimate.estimate(scn, "int8")["k"] == k_gather
    assert dilation.choose(scn, "netsenseml")[0] >= 1000 / factor.GATHER_REAL_MBIT


def test_codecs_timed_for_auto_follow_the_method() -> None:
    assert dilation.codec_specs(methods.parse("allreduce")) == []
    assert dilation.codec_specs(methods.parse("topk:0.01")) == ["topk:0.01"]
    assert dilation.codec_specs(methods.parse("netsenseml")) == ["fp16", "int8", "topk:0.01"]
    assert dilation.codec_specs(methods.parse("powersgd:4")) == []


def test_overruns_count_each_ranks_steps_after_the_first() -> None:
    rows = [{"rank": r, "step": s, "samples": 8, "pace_overrun": int(r == 1 and s in (1, 3)),
             "pace_late_s": 0.002 if (r == 1 and s == 3) else 0.0, "step_s": 0.01}
            for r in (0, 1) for s in (1, 2, 3, 4)]
    over = metrics.overruns(rows)
    # rank 1's first step (a warm-up, as for throughput) is not counted; its lateness added
    # 2 ms to its 30 ms of counted steps
    assert over == {"steps": 1, "of": 6, "share": round(1 / 6, 5), "per_rank": [0, 1],
                    "late_s_max": 0.002, "late_share": round(0.002 / 0.03, 5)}
    assert metrics.overruns([{"rank": 0, "step": 1, "samples": 8}]) is None  # native


def test_a_scenario_names_its_accelerator_or_is_refused() -> None:
    scn = load_scenario("xover-static")
    with pytest.raises(ValueError, match="exactly one of profile or step_ms"):
        apply_overrides(scn, {"accelerator": {"dilation": 2}})
    with pytest.raises(ValueError, match="accelerator.*no such shipped profile"):
        apply_overrides(scn, {"accelerator": {"profile": "no-such-gpu"}})
    with pytest.raises(ValueError, match="dilation"):
        apply_overrides(scn, {"accelerator": {"step_ms": 1, "dilation": 0.5}})
    # a profile without an entry for the workload names what it has
    with pytest.raises(ValueError, match="no entry for mlp.*it has: mlp\\[width=512\\]"):
        apply_overrides(scn, {"accelerator": {"profile": "a100-estimated"},
                              "workload.args.width": 256})


def test_the_worker_argv_carries_the_accelerator_and_the_factor(tmp_path: Path) -> None:
    from testbed.orchestration.workers import worker_argv

    scn = load_scenario("accel-static")
    argv = worker_argv(scn, methods.parse("fp16"), 0, tmp_path, dilation=40)
    assert argv[argv.index("--accelerator") + 1] == "a100-estimated"
    assert argv[argv.index("--dilation") + 1] == "40"
    assert argv[argv.index("--time-limit") + 1] == "2"  # virtual: the worker's clock is too
    assert "--dilation" not in worker_argv(scn, methods.parse("fp16"), 0, tmp_path)
    json.dumps(argv)


def test_ranks_in_lockstep_need_the_cores_for_their_whole_steps_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """8 ranks on 2 cores whose parts each look fast alone (short parts run within a time
    slice) still need 4x their step's CPU seconds, since all start each step together."""
    monkeypatch.setattr(factor, "PER_STEP_BOOKKEEPING_S", 0.0)
    timing = accelerator.Timing(0.005, 0.010, 0.0, {"topk": 0.001})
    real = {"forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.0, "between_s": 0.005,
            "elements": 250_000, "codec_s": {}}
    assert factor.least_factor(timing, real, margin=1.0) == 3  # the parts' walls: 15/5 ms
    lockstep = dict(real, step_cpu_s=0.03, processes=8, threads=1, cores=2)
    assert factor.lockstep_need(timing, lockstep, mb=1.0) == pytest.approx(8.0)  # 4 x 30/15
    assert factor.least_factor(timing, lockstep, margin=1.0) == 8
    # a codec's CPU joins the step's, against the step's slots with the codec's (1 MB)
    coded = dict(lockstep, codec_cpu_s={"topk": 0.018})
    assert factor.lockstep_need(timing, coded, mb=1.0) == pytest.approx(4 * 0.048 / 0.016)
    alone = dict(lockstep, processes=2)  # a core each: no sharing beyond the step's own
    assert factor.lockstep_need(timing, alone, mb=1.0) == pytest.approx(2.0)
