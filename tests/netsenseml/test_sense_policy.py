"""netsenseml monitor and policy on synthetic sample streams (pure Python, no processes).

The link model of these traces: a collective of ``b`` bytes on a path of base latency
``L`` and bottleneck rate ``R`` takes ``L + b / R`` seconds; each step sends an 8-byte
probe (like the size exchange of a sparse all-gather) and then its gradient in buckets,
then computes for ``compute`` seconds.
"""

import pytest

from netsenseml.policy import BDPRule, NetSensePolicy, Observation, bytes_ratio
from netsenseml.sense import NetworkMonitor, WindowedExtreme


class Link:
    """Simulated clock and monitor that persist across phases of a trace."""

    def __init__(self, window=5.0):
        self.mon = NetworkMonitor(window)
        self.t = 0.0


def simulate(
    policy, rates, *, compute=0.1, grad=40e6, latency=1e-3, buckets=4, link=None, probe=True
):
    """Runs ``policy`` over one step per entry of ``rates``; returns per-step records.

    ``probe=False`` leaves out the 8-byte probe: the monitor then sees only the gradient's
    own collectives, as with the netsenseml hook at an agreed top-k size.
    """
    link = link or Link()
    mon, t = link.mon, link.t
    out = []
    for rate in rates:
        d = policy.decision
        b = grad * bytes_ratio(d.level, d.ratio)
        comm = 0.0
        if probe:
            t += latency
            mon.add(8, latency, t)
            comm = latency
        for _ in range(buckets):
            s = latency + (b / buckets) / rate
            t += s
            comm += s
            mon.add(b / buckets, s, t)
        t += compute
        est = mon.estimate(t)
        policy.observe(Observation(comm, compute, b, est.bdp))
        out.append({"level": d.level, "ratio": d.ratio, "bytes": b / grad, "comm": comm})
    link.t = t
    return out


def level_changes(records):
    return sum(1 for a, b in zip(records, records[1:], strict=False) if a["level"] != b["level"])


# ---------------------------------------------------------------- monitor
def test_sense_windowed_extreme_expires_old_samples():
    w = WindowedExtreme(1.0, "max")
    w.add(5.0, 0.0)
    w.add(3.0, 0.5)
    assert w.value(0.9) == 5.0
    assert w.value(1.2) == 3.0  # the 5.0 left the window
    m = WindowedExtreme(1.0, "min")
    for i, v in enumerate([4.0, 2.0, 3.0]):
        m.add(v, i * 0.4)
    assert m.value() == 2.0
    assert m.value(2.0) == 3.0  # newest sample kept even past the window


def test_sense_monitor_estimates_rate_rtt_bdp_and_queueing():
    latency, rate = 2e-3, 50e6
    mon = NetworkMonitor(window_s=2.0)
    t = 0.0
    for i in range(40):
        b = 8 if i % 4 == 0 else 1e6 * (1 + i % 3)
        s = latency + b / rate
        t += s
        mon.add(b, s, t)
    est = mon.estimate(t)
    assert est.min_rtt == pytest.approx(latency, rel=1e-3)
    assert est.max_rate == pytest.approx(rate, rel=1e-3)
    assert est.bdp == pytest.approx(rate * latency, rel=1e-3)
    assert est.queue_delay == pytest.approx(0.0, abs=1e-9)
    # A collective delayed by 30 ms of queueing shows up as queueing delay.
    mon.add(1e6, latency + 1e6 / rate + 0.030, t + 0.1)
    assert mon.estimate(t + 0.1).queue_delay == pytest.approx(0.030, rel=1e-3)


def test_sense_monitor_rate_falls_after_window():
    mon = NetworkMonitor(window_s=1.0)
    mon.add(8, 1e-3, 0.0)
    mon.add(1e6, 1e-3 + 1e6 / 100e6, 0.1)
    assert mon.estimate(0.1).max_rate == pytest.approx(100e6, rel=1e-3)
    for i in range(20):  # the link slows 10x
        t = 0.2 + 0.1 * i
        mon.add(8, 1e-3, t)
        mon.add(1e6, 1e-3 + 1e6 / 10e6, t + 0.05)
    assert mon.estimate(2.3).max_rate == pytest.approx(10e6, rel=1e-3)


def test_sense_monitor_ignores_empty_samples():
    mon = NetworkMonitor()
    mon.add(0, 1.0, 0.0)
    mon.add(10, 0.0, 0.0)
    assert mon.estimate(0.0) is None


# ---------------------------------------------------------------- policy (a): the BDP rule
def test_policy_bdp_rule_constants():
    rule = BDPRule()
    assert (rule.bdp_gain, rule.decrease, rule.increase, rule.floor) == (0.9, 0.95, 0.001, 0.005)
    assert rule.update(inflight_bytes=91, bdp=100) == pytest.approx(0.95)
    assert rule.update(inflight_bytes=90, bdp=100) == pytest.approx(0.951)
    for _ in range(200):
        rule.update(1e9, 1.0)
    assert rule.ratio == 0.005  # floor
    for _ in range(2000):
        rule.update(0, 1.0)
    assert rule.ratio == 1.0  # ceiling


def test_policy_bdp_rule_rate_drop_and_recovery():
    """Rule (a) alone. Path: L = 10 ms, 5 MB gradient, R = 1 GB/s -> 100 MB/s -> 1 GB/s.

    Bounds: uncongested (BDP 10 MB > 5 MB / 0.9) it stays at 1.0 with no change at all;
    after the drop the kept fraction falls below 0.5 within 60 steps (the 5 s max-rate
    window is ~30 steps here, then x0.95 per step); after recovery it returns to no
    compression within 500 steps and to fraction 1.0 within (1 - 0.005) / 0.001 = 995.
    """
    policy, link = NetSensePolicy(mode="bdp"), Link()
    path = {"grad": 5e6, "latency": 10e-3, "buckets": 1, "link": link}
    rec = simulate(policy, [1e9] * 300, **path)
    assert {r["ratio"] for r in rec} == {1.0} and level_changes(rec) == 0
    rec = simulate(policy, [1e8] * 300, **path)
    assert min(i for i, r in enumerate(rec) if r["ratio"] < 0.5) <= 60
    assert rec[-1]["level"] == "topk" and rec[-1]["ratio"] < 0.15
    ratios = []
    for _ in range(1000):
        simulate(policy, [1e9], **path)
        ratios.append((policy.decision.level, policy.rule.ratio))
    assert min(i for i, (lvl, _) in enumerate(ratios) if lvl == "none") <= 500
    assert min(i for i, (_, r) in enumerate(ratios) if r >= 1.0) <= 995


# ---------------------------------------------------------------- policy (b): the ladder
def test_policy_ladder_steady_uncongested_never_compresses():
    """40 MB gradient at 1 GB/s: comm 44 ms < compute 100 ms. Bound: 0 changes in 500 steps."""
    rec = simulate(NetSensePolicy(), [1e9] * 500)
    assert all(r["level"] == "none" for r in rec)


def test_policy_ladder_steady_busy_link_does_not_oscillate():
    """comm 0.85 x compute at fp32 (between release 0.8 and comm-bound 1.0): hysteresis.

    Bound: no level change in 500 steps.
    """
    rate = 40e6 / (0.085 - 5e-3)
    rec = simulate(NetSensePolicy(), [rate] * 500)
    assert level_changes(rec) == 0


def test_policy_ladder_rate_drop_and_recovery():
    """1 GB/s -> 100 MB/s -> 1 GB/s with a 100 ms compute step.

    Bounds: after the drop the bytes sent fall to <= 0.2 of fp32 (top-k) within 5 steps
    (one ladder level per comm-bound step); while the slow link lasts the level does not
    change again (no oscillation) and the kept fraction stays <= 0.125 (int8's bytes);
    after recovery it is back to no compression within 15 steps (3 levels x 3 steps
    patience) and stays there.
    """
    policy, link = NetSensePolicy(), Link()
    simulate(policy, [1e9] * 100, link=link)
    rec = simulate(policy, [1e8] * 300, link=link)
    first = min(i for i, r in enumerate(rec) if r["bytes"] <= 0.2)
    assert first <= 5
    assert rec[first]["level"] == "topk" and rec[first]["ratio"] < 1.0
    assert level_changes(rec[first:]) == 0
    assert max(r["ratio"] for r in rec[first:]) <= 0.125
    assert sum(r["comm"] for r in rec[-100:]) / 100 <= 0.1  # comm no longer holds the step
    rec = simulate(policy, [1e9] * 200, link=link)
    back = min(i for i, r in enumerate(rec) if r["level"] == "none")
    assert back <= 15
    assert all(r["level"] == "none" for r in rec[back:])


def test_policy_ladder_congestion_at_topk_without_probes():
    """Cross-traffic arrives while the policy already sends top-k, and no small collective
    probes the base latency and the gradient goes in one bucket (the monitor's BDP then
    follows the payload: min RTT and max rate come from the same samples).

    Bounds: at 50 MB/s the ratio settles (comm <= compute); a further 5x drop cuts the
    kept fraction below half its settled value within 20 steps (0.95^14 < 0.5) and keeps
    it there; when the rate returns the level is back to no compression within 300 steps.
    """
    policy, link = NetSensePolicy(), Link()
    simulate(policy, [1e9] * 50, link=link, probe=False, buckets=1)
    settled = simulate(policy, [5e7] * 300, link=link, probe=False, buckets=1)
    assert settled[-1]["level"] == "topk"
    before = settled[-1]["ratio"]
    congested = simulate(policy, [1e7] * 100, link=link, probe=False, buckets=1)
    first = min(i for i, r in enumerate(congested) if r["ratio"] < before / 2)
    assert first <= 20
    assert all(r["ratio"] < before / 2 for r in congested[first:])
    assert all(r["level"] == "topk" for r in congested)
    rec = simulate(policy, [1e9] * 300, link=link, probe=False, buckets=1)
    back = min(i for i, r in enumerate(rec) if r["level"] == "none")
    assert back <= 300
    assert all(r["level"] == "none" for r in rec[back:])


def test_policy_ladder_jumps_to_the_level_that_fits():
    """With ``jump`` the policy compresses as much as the measurement says, at once.

    A 10x drop (comm 4x compute at fp32) goes to top-k on the first observed step; a
    1.5x overload (fp16's predicted comm fits) goes to fp16 and stays there: it does not
    compress more than needed. Without ``jump`` the same 10x drop climbs one level per step.
    """
    policy, link = NetSensePolicy(), Link()
    simulate(policy, [1e9] * 100, link=link)
    rec = simulate(policy, [1e8] * 20, link=link)
    assert rec[0]["level"] == "none" and rec[1]["level"] == "topk"
    assert all(r["level"] == "topk" for r in rec[1:])

    rate = 40e6 / 0.145  # ~0.15 s comm at fp32 vs 0.1 s compute
    rec = simulate(NetSensePolicy(), [rate] * 200)
    assert [r["level"] for r in rec[:2]] == ["none", "fp16"]
    assert all(r["level"] == "fp16" for r in rec[1:])

    policy, link = NetSensePolicy(jump=False), Link()
    simulate(policy, [1e9] * 100, link=link)
    rec = simulate(policy, [1e8] * 20, link=link)
    assert [r["level"] for r in rec[:4]] == ["none", "fp16", "int8", "topk"]


def test_policy_compute_estimate_ignores_stalls_outside_the_hook():
    """Three steps in four carry a 0.5 s stall outside the hook (e.g. a small collective of
    the job's own waiting behind a congested queue); the hook counts it as compute.

    Bound: with the windowed-minimum compute (default) the policy reaches top-k, never
    leaves it, and holds comm within 1.2x the true 50 ms compute; judged per step
    (``compute_window=1``) the stalls make it flip between top-k and int8.
    """

    def run(**kw):
        policy, rec = NetSensePolicy(**kw), []
        for i in range(80):
            d = policy.decision
            b = bytes_ratio(d.level, d.ratio)
            comm = 0.002 + 0.4 * b
            compute = 0.05 if i % 4 == 0 else 0.55
            policy.observe(Observation(comm, compute, 40e6 * b, 1e12))
            rec.append({"level": d.level, "comm": comm})
        return rec

    rec = run()
    first = min(i for i, r in enumerate(rec) if r["level"] == "topk")
    assert all(r["level"] == "topk" for r in rec[first:])
    assert sum(r["comm"] for r in rec[-20:]) / 20 <= 1.2 * 0.05
    assert level_changes(run(compute_window=1)[40:]) >= 1


def test_policy_ladder_compute_bound_slow_link_stays_uncompressed():
    """A slow link does not trigger compression when compute dominates the step."""
    rec = simulate(NetSensePolicy(), [1e8] * 200, compute=1.0)
    assert all(r["level"] == "none" for r in rec)


def test_policy_rejects_bad_parameters():
    with pytest.raises(ValueError, match="mode"):
        NetSensePolicy(mode="fast")
    with pytest.raises(ValueError, match="hysteresis"):
        NetSensePolicy(release_factor=1.5)
    with pytest.raises(ValueError, match="max_cut"):
        NetSensePolicy(max_cut=0.99)
    with pytest.raises(ValueError, match="compute_window"):
        NetSensePolicy(compute_window=0)
