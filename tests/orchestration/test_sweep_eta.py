"""The sweep bar's ETA: the pending runs' estimates, scaled by how the finished runs compared
with their own estimates."""

from testbed.orchestration.sweep import SweepEta


def test_eta_scales_remaining_estimates_by_the_observed_pace():
    eta = SweepEta([10.0, 0.0, 10.0, 20.0])  # the 0 is a run already done (skipped)
    assert eta.seconds() == 40.0 and eta.text() == "ETA 0:40"
    eta.done(0, 20.0)  # twice as slow as estimated
    assert eta.seconds() == 60.0
    eta.done(2, 10.0)  # 30 s for 20 s of estimate so far: 1.5x
    assert eta.seconds() == 30.0
    eta.done(3, 5.0)
    assert eta.seconds() == 0.0 and eta.text() == ""
