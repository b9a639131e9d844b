"""The sensing validation's truths at the steps' own times (issue 49): a configured rate
that holds until the next applied ``set_rate`` (not a line drawn between the sampler's
sparse readings), phases cut at the applied cross-traffic edges, and the error against the
truth the policy needs (available when idle, the fair share when congested)."""

import pytest

from testbed.analysis import sensing
from testbed.common import files


def _run(tmp_path):
    """A dumbbell run: the bottleneck at 1000 Mbit/s, sampled once a second; at t = 5.5 it
    drops to 200 and 8 cross streams start (their servers receive 180). A monitor that reads
    1000 before and the fair share 200 / 9 after."""
    files.write_json(tmp_path / "config.json", {"world_size": 2, "scenario": {"timeline": [
        {"kind": "set_rate", "at_s": 5.5, "link": "bottleneck", "rate_mbit": 200},
        {"kind": "cross_start", "at_s": 5.5, "id": "c1", "src": "x0", "dst": "x1",
         "streams": 8}]}})
    files.write_json(tmp_path / "summary.json", {"network": {"cross_traffic": [
        {"id": "c1", "started_t": 5.5, "received_intervals": [[0.0, 1.0, 180.0]]}]}})
    files.write_csv(tmp_path / "events.csv", ["t_scheduled", "t_applied", "kind", "target", "value"], [
        {"t_scheduled": 5.5, "t_applied": 5.5, "kind": "set_rate", "target": "bottleneck",
         "value": 200.0},
        {"t_scheduled": 5.5, "t_applied": 5.5, "kind": "cross_start", "target": "c1", "value": 8}])
    truth = [{"t": float(t), "link": "bottleneck", "toward": "s1",
              "configured_mbit": 1000.0 if t < 6 else 200.0, "delivered_mbit": 500.0,
              "backlog_bytes": 0, "drops_per_s": 0, "sent_bytes": t * 1e6} for t in range(10)]
    files.write_csv(tmp_path / "bottleneck.csv", sorted(truth[0]), truth)
    steps = []
    for i, t in enumerate([5.0, 5.1, 5.2, 5.3, 5.4, 5.6, 5.7, 5.8, 5.9, 6.2]):
        est = 1000.0 if t < 5.5 else 200.0 / 9
        steps.append({"t": t, "rank": 0, "step": i, "level": "none", "est_rate_mbit": est,
                      "est_bdp_bytes": 1.0, "est_min_rtt_s": 1e-4, "est_queue_delay_s": 0.0})
    files.write_csv(tmp_path / "steps.csv", sorted(steps[0]), steps)


def test_truths_hold_until_the_applied_edges_and_the_needed_error_is_per_phase(tmp_path):
    _run(tmp_path)
    table, summary = sensing.validate(tmp_path)
    before, after = table[table["t"] < 5.5], table[table["t"] > 5.5]
    # interpolated between the samples at 5 (1000) and 6 (200), 5.4 would read 680
    assert list(before["configured_mbit"]) == [1000.0] * 5
    assert list(before["phase"]) == ["idle"] * 5 and list(after["phase"]) == ["congested"] * 5
    assert list(after["configured_mbit"]) == [200.0] * 5
    assert list(after["available_mbit"]) == pytest.approx([20.0] * 5)  # 200 less the 180 received
    assert list(after["fair_mbit"]) == pytest.approx([200 / 9] * 5, abs=1e-3)
    assert summary["needed"] == {"idle": "available", "congested": "fair"}
    assert summary["dilation"] == 1.0  # not dilated: the factor every number is read with
    assert summary["rate_medae_rel_idle_needed"] == 0.0
    assert summary["rate_medae_rel_congested_needed"] == pytest.approx(0.0, abs=1e-3)
    # against the available rate the same estimate is 11 % off (22.2 on 20)
    assert summary["rate_medae_rel_congested"] == pytest.approx(1 / 9, abs=1e-3)


def test_configured_rate_without_events_holds_the_last_sample(tmp_path):
    import pandas as pd

    samples = pd.Series([1000.0, 200.0], index=[0.0, 1.0])
    got = sensing.configured_at(tmp_path, "bottleneck", samples, [0.5, 0.99, 1.0, 3.0])
    assert list(got) == [1000.0, 1000.0, 200.0, 200.0]


def test_steps_with_truth_gives_every_step_the_truths_validate_uses(tmp_path):
    """Every rank-0 step, with or without an estimate, carries the truths at its time, the
    one the policy needs per phase, and the link factor (2 ranks: 1)."""
    _run(tmp_path)
    import pandas as pd

    raw = pd.read_csv(tmp_path / "steps.csv")
    raw.loc[raw["step"] < 3, "est_rate_mbit"] = float("nan")  # no estimate yet
    raw.to_csv(tmp_path / "steps.csv", index=False)
    got = sensing.steps_with_truth(tmp_path)
    table, _ = sensing.validate(tmp_path)
    assert list(got["step"]) == list(range(10))
    same = got.set_index("step").loc[table["step"]]
    assert list(same["fair_mbit"]) == pytest.approx(list(table["fair_mbit"]), abs=1e-3)
    assert list(same["available_mbit"]) == pytest.approx(list(table["available_mbit"]), abs=1e-3)
    assert list(same["phase"]) == list(table["phase"])
    idle, congested = got[got["phase"] == "idle"], got[got["phase"] == "congested"]
    assert list(idle["needed_mbit"]) == list(idle["available_mbit"])
    assert list(congested["needed_mbit"]) == list(congested["fair_mbit"])
    assert set(got["link_factor"]) == {1.0}


def test_steps_with_truth_reads_a_run_without_a_monitor(tmp_path):
    """A fixed level's run has no estimate: validate refuses it, its truths still come."""
    import pandas as pd

    _run(tmp_path)
    raw = pd.read_csv(tmp_path / "steps.csv").drop(columns=["est_rate_mbit"])
    raw.to_csv(tmp_path / "steps.csv", index=False)
    with pytest.raises(sensing.SensingError, match="no rate estimate"):
        sensing.validate(tmp_path)
    got = sensing.steps_with_truth(tmp_path)
    assert len(got) == 10 and got["fair_mbit"].iloc[-1] == pytest.approx(200 / 9, abs=1e-3)
