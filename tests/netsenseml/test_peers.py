"""The adaptive peers' rules on known inputs (issue 49): StellaTrain (a bandwidth trace in,
the kept fractions out, with its 3-iteration delay and its wait back-off) and Accordion (a
norm history in, the per-bucket levels out, light at the start and at a learning-rate
decay), each through the real step loop (``netsenseml.loop``) the hook and the replay
drive. Pure Python: no torch, no network.
"""

from __future__ import annotations

import math

import pytest

from netsenseml import methods, replay
from netsenseml.accordion import (
    AccordionPolicy,
    BucketDecisions,
    change_ratios,
    heavy_buckets,
    ladder_decision,
)
from netsenseml.loop import DECISION_LAG, Measured, StepLoop, from_wire, to_wire
from netsenseml.policy import Calibration, Decision, Observation
from netsenseml.stellatrain import (
    StellaTrainPolicy,
    back_off,
    fitting_fraction,
    received_bps,
    traffic_bps,
)

N = 1_000_000  # gradient elements
CAL = Calibration(dense_bytes=4.0 * N, world_size=2, latency_s=1e-4, s_per_byte=1e-9,
                  topk_bytes_per_element=8.0)


# ----------------------------------------------------------------------------- StellaTrain
def test_stellatrain_traffic_is_the_gathered_sparse_bits_per_compute_second():
    # ceil(0.1 x 1000) + max(1, ceil(0.1 x 10)) = 101 elements of 8 bytes, to 3 peers, in 0.1 s
    assert traffic_bps(0.1, [1000, 10], 4, 8.0, 0.1) == pytest.approx(101 * 8 * 8 * 3 / 0.1)
    assert traffic_bps(0.0001, [10], 2, 8.0, 1.0) == 64  # at least one element per tensor
    assert traffic_bps(0.5, [10], 1, 8.0, 1.0) == 0  # nobody to send to
    assert traffic_bps(0.5, [10], 2, 8.0, 0.0) == math.inf


def test_stellatrain_search_keeps_the_largest_fraction_that_fits():
    t_iter = 0.1
    target = traffic_bps(0.25, [N], 2, 8.0, t_iter)
    kept = fitting_fraction(target, [N], 2, 8.0, t_iter)
    assert traffic_bps(kept, [N], 2, 8.0, t_iter) <= target
    assert kept == pytest.approx(0.25, abs=1e-6)  # 20 halvings of [0, 0.999]
    assert fitting_fraction(1e30, [N], 2, 8.0, t_iter) == 1.0  # everything fits
    assert fitting_fraction(1.0, [N], 2, 8.0, t_iter) == pytest.approx(0.001)  # nothing does


def test_stellatrain_target_moves_by_the_wait_share():
    assert back_off(100.0, 200.0, 0.0) == pytest.approx(110 * 1.1)  # nobody waited: up 10 %
    assert back_off(100.0, 200.0, 0.2) == pytest.approx(110 * 0.8)  # down by the share
    assert back_off(100.0, 200.0, 0.6) == pytest.approx(110 * 0.75)  # at most a quarter


def test_stellatrain_goodput_is_what_a_rank_received_per_second():
    gathered = Observation(Decision("topk", 0.1), comm_s=0.5, exposed_s=0, compute_s=1,
                           codec_s=0, bytes_sent=1000)
    assert received_bps(gathered, 4) == 1000 * 3 * 8 / 0.5  # the three others' payloads
    ring = Observation(Decision("none"), comm_s=0.5, exposed_s=0, compute_s=1, codec_s=0,
                       bytes_sent=1000)
    assert received_bps(ring, 4) == pytest.approx(1000 * 1.5 * 8 / 0.5)  # 2 (N-1) / N
    assert received_bps(ring, 1) == 0


def _measured(decision: Decision, bw_bps: float, compute_s: float, exposed_s: float) -> Measured:
    """A step of ``decision`` on a link of ``bw_bps``: its comm time is what one rank of two
    receives (the other's payload) at that rate, so the goodput measured is ``bw_bps``."""
    handed = N * 8.0 * decision.ratio if decision.level == "topk" else 4.0 * N
    # 2 ranks: each receives (N - 1) = 2 (N - 1) / N = 1 times what it handed over
    return Measured(comm_s=handed * 8 / bw_bps, exposed_s=exposed_s,
                    compute_s=compute_s, codec_s=0.0, bytes_sent=handed, collectives=1)


def test_stellatrain_bandwidth_trace_in_kept_fractions_out():
    """64 Mbit/s for 12 steps (the accelerator waits 4 % of a step: below the 5 % floor),
    then 32 Mbit/s with the accelerator waiting half of each step. Decisions at the 4th
    observation (warm-up) and then every 3 + 5 steps, each applied 3 steps after the step
    observed: kept = T x t_iter / (8 B x 8 bit x 1 peer) / N elements."""
    loop = StepLoop(StellaTrainPolicy())
    loop.calibrate(CAL)
    compute = 0.1
    kept = []
    for step in range(1, 33):
        decision = loop.next_step()
        kept.append(decision.ratio)
        slow = step > 12
        loop.end_step(_measured(decision, 32e6 if slow else 64e6, compute,
                                compute if slow else 0.004))
    t1 = 64e6  # first decision (observation 4): T = the goodput
    t2 = (0.9 * t1 + 0.1 * 64e6) * 1.1  # observation 12: f = 0.038 < 0.05 -> x 1.1
    g20 = 32e6 + 32e6 * 0.1 ** 8  # EWMA (0.1 old) after 8 slow steps
    t3 = (0.9 * t2 + 0.1 * g20) * 0.75  # observation 20: f = 0.5 -> x max(0.75, 0.5)
    t4 = (0.9 * t3 + 0.1 * 32e6) * 0.75  # observation 28
    expect = [0.01] * 6 + [t1 * compute / 64 / N] * 8 + [t2 * compute / 64 / N] * 8 \
        + [t3 * compute / 64 / N] * 8 + [t4 * compute / 64 / N] * 2
    assert kept == pytest.approx(expect, abs=2e-6)
    assert [k for k, _ in loop.policy.decided] == [4, 12, 20, 28]
    # the decision taken at observation 4 is first sent at step 4 + 3
    assert kept[4 + 3 - 2] == 0.01 and kept[4 + 3 - 1] != 0.01
    assert loop.policy.step_stats(loop.decision)["stella_wait_share"] == 0.5


def test_stellatrain_sends_fp32_allreduce_when_everything_fits():
    loop = StepLoop(StellaTrainPolicy(warmup=1, delay=DECISION_LAG, settle=0))
    loop.calibrate(CAL)
    levels = []
    for _ in range(4):
        d = loop.next_step()
        levels.append(d.level)
        loop.end_step(_measured(d, 1e12, 0.1, 0.0))  # a link far faster than the gradient
    assert levels == ["topk", "topk", "none", "none"]


def test_stellatrain_refuses_a_delay_the_loop_cannot_hold():
    with pytest.raises(ValueError, match="delay"):
        StellaTrainPolicy(delay=1)


def test_stellatrain_replay_compresses_more_on_the_slower_link():
    """Through the replay (a calibrated link model, the registration calibration included):
    the kept fraction on a 50 Mbit/s link ends far below the one on 2 Gbit/s."""
    job = replay.Job(dense_bytes=4e6, world_size=2, compute_s=0.05)
    fast, slow = replay.Link(rate=2e9 / 8), replay.Link(rate=50e6 / 8)
    steps = replay.replay(StellaTrainPolicy(), job, [fast] * 40 + [slow] * 60)
    on_fast, on_slow = steps[39].decision, steps[-1].decision
    kept_fast = 1.0 if on_fast.level == "none" else on_fast.ratio
    assert on_slow.level == "topk" and on_slow.ratio < 0.2 * kept_fast, (on_fast, on_slow)


# ----------------------------------------------------------------------------- Accordion
def test_accordion_change_ratio_and_the_threshold():
    assert change_ratios([10, 10, 0], [16, 12, 5]) == pytest.approx([0.6, 0.2, math.inf])
    assert heavy_buckets(None, [1.0, 2.0]) == [False, False]  # first interval: light
    assert heavy_buckets([10, 10, 0], [16, 12, 5]) == [False, True, False]
    assert heavy_buckets([10.0], [15.0]) == [False]  # r = 0.5 is critical: light
    assert heavy_buckets([10.0, 10.0], [15.0]) == [False]  # another layout: as the first


def test_accordion_levels_come_from_the_ladder():
    assert ladder_decision("topk:0.1") == Decision("topk", 0.1)
    assert ladder_decision("int8") == Decision("int8")
    for bad in ("powersgd:2", "netsenseml", "dgc:0.1"):
        with pytest.raises(ValueError, match="ladder"):
            ladder_decision(bad)
    with pytest.raises(ValueError, match="interval"):
        AccordionPolicy(interval=0)


def test_accordion_norm_history_in_levels_out():
    """Windows of 4 steps over two buckets; the norms of windows 1-5 arrive with the
    observations of steps 4, 8, 12, 16, 20; the learning rate decays at step 19. Each
    decision applies two steps after the step observed."""
    history = {4: [10.0, 10.0],  # first window: light (nothing to compare)
               8: [16.0, 12.0],  # r = 0.6 light, 0.2 heavy
               12: [16.5, 6.0],  # r = 0.03 heavy, 0.5 light
               16: [16.0, 6.0],  # both heavy
               20: [17.0, 6.1]}  # both heavy again after the decay's forced light
    loop = StepLoop(AccordionPolicy(interval=4, lr_decay_steps=(19,)))
    seen, labels = [], []
    for step in range(1, 25):
        d = loop.next_step()
        seen.append("".join("H" if d.for_bucket(i).level == "topk" else "L" for i in (0, 1)))
        labels.append((d.level, d.ratio))
        loop.end_step(Measured(0.01, 0.0, 0.1, 0.0, 1e6, 1,
                               grad_norms=tuple(history.get(step, ()))))
    assert seen == ["LL"] * 9 + ["LH"] * 4 + ["HL"] * 4 + ["HH"] + ["LL"] * 3 + ["HH"] * 3
    # the record's level: heavy where any bucket is, else light
    assert labels[12] == ("topk", 0.1) and labels[0] == ("none", 1.0) and labels[19] == ("none", 1.0)
    policy = loop.policy
    assert policy.forced == [17] and [k for k, _ in policy.checks] == [4, 8, 12, 16, 20]
    assert policy.step_stats(loop.decision) == {"accordion_heavy_buckets": 2, "accordion_buckets": 2}


def test_accordion_unknown_bucket_sends_light():
    d = BucketDecisions("topk", 0.1, buckets=(Decision("topk", 0.1),), rest=Decision("none"))
    assert d.for_bucket(0) == Decision("topk", 0.1) and d.for_bucket(5) == Decision("none")
    assert Decision("int8").for_bucket(3) == Decision("int8")  # one decision per step


def test_accordion_norms_ride_the_wire_as_a_mean():
    """The per-bucket norms travel after the observation's values and come back as the
    mean over ranks (the hook sums the ranks' values pre-divided by the world size)."""
    a = Observation(Decision("none"), 0.01, 0.0, 0.1, 0.0, 1e6, grad_norms=(2.0, 4.0))
    b = Observation(Decision("none"), 0.03, 0.0, 0.1, 0.0, 1e6, grad_norms=(4.0, 8.0))
    mean = [(x + y) / 2 for x, y in zip(to_wire(a), to_wire(b), strict=True)]
    obs = from_wire(mean, Decision("none"))
    assert obs is not None and obs.grad_norms == (3.0, 6.0) and obs.comm_s == pytest.approx(0.02)
    plain = from_wire(to_wire(Observation(Decision("none"), 0.01, 0, 0.1, 0, 1e6)), Decision("none"))
    assert plain is not None and plain.grad_norms == ()


def test_accordion_replays_a_norm_trace():
    """The replay feeds a norm trace to a policy that reads norms; the link does not move
    Accordion, the norms do: steady norms go heavy, a jump goes light."""
    job = replay.Job(dense_bytes=4e6, world_size=2, compute_s=0.05)
    norms = {5: [1.0], 10: [1.1], 15: [5.0], 20: [5.2]}
    steps = replay.replay(AccordionPolicy(interval=5), job, [replay.Link(rate=1e8)] * 24,
                          grad_norms=lambda k: norms[k])
    levels = [s.decision.level for s in steps]
    assert levels[:11] == ["none"] * 11  # the first two windows and the lag
    assert levels[11:16] == ["topk"] * 5  # windows 1 -> 2: r = 0.1
    assert levels[16:21] == ["none"] * 5  # 2 -> 3: r = 3.5, a critical regime
    assert levels[21:] == ["topk"] * 3  # 3 -> 4: r = 0.04


# ----------------------------------------------------------------------------- registry
def test_peers_are_registered_adaptive_methods_with_their_traits():
    st, acc = methods.get("stellatrain"), methods.get("accordion")
    assert st.kind == acc.kind == "adaptive"
    assert acc.needs_values and not st.needs_values  # Accordion reads gradient values
    assert not methods.get("netsenseml").needs_values
    assert isinstance(methods.resolve("accordion").build(), AccordionPolicy)
    built = methods.resolve("stellatrain").build(settle=2)
    assert isinstance(built, StellaTrainPolicy) and built.settle == 2
    assert built.needs_values == st.needs_values and AccordionPolicy.needs_values == acc.needs_values
    with pytest.raises(ValueError, match="accordion"):
        methods.resolve("accordion").build(nonsense=1)
