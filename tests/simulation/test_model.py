"""The analytic step model's formulas: the closed form the SimGrid engine is checked against
(``test_sim.py``) and the quick estimate without a simulation."""

from __future__ import annotations

import pytest

from testbed.simulation.model import (
    FlowModel,
    LinkCalibration,
    StepInput,
    oversubscription,
    volume_and_messages,
)


def test_ring_volumes() -> None:
    assert volume_and_messages("allreduce", 1, 1000) == (0.0, 0)
    assert volume_and_messages("allreduce", 2, 1000) == (1000.0, 2)
    assert volume_and_messages("allreduce", 8, 1000) == (1750.0, 14)
    assert volume_and_messages("allgather", 8, 1000) == (7000.0, 7)
    with pytest.raises(ValueError, match="collective"):
        volume_and_messages("broadcast", 4, 1)


def test_comm_time_and_sharing() -> None:
    m = FlowModel(LinkCalibration(alpha_s=0.001, eta=0.5))
    x = StepInput(n=4, collective="allreduce", payload_bytes=1e6, rate_mbit=8,
                  compute_s=0.1)
    # 1.5 MB at 8 Mbit/s x 0.5 = 3 s, + 6 messages x 1 ms
    assert m.comm_s(x) == pytest.approx(3.006)
    busy = StepInput(**{**x.__dict__, "competing": 3})
    assert m.comm_s(busy) == pytest.approx(4 * 3.0 + 0.006)
    assert m.throughput(x) == pytest.approx(4 / (0.1 + 3.006))


def test_oversubscription_only_beyond_the_cores() -> None:
    assert oversubscription(2, 2) == 1.0 and oversubscription(8, 2) == 4.0
    assert oversubscription(8, None) == 1.0
