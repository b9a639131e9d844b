"""The step model's formulas and its calibration (no emulation; the validation against
emulated 2/4/8-worker runs is `python -m testbed.simulation` on the sim-validate sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.simulation.calibrate import RunStats, fit_link, step_input
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


def _stats(method: str, collective: str, n: int, payload: float, comm: float) -> RunStats:
    return RunStats(Path("."), method, collective, n, 20.0, 16, 10, 0.02, 0.001, comm,
                    comm + 0.021, payload, 1.0)


def test_fit_recovers_alpha_and_eta() -> None:
    true = FlowModel(LinkCalibration(alpha_s=0.004, eta=0.8))
    runs = []
    for method, coll, payload in (("allreduce", "allreduce", 340e3), ("fp16", "allreduce",
                                  170e3), ("topk:0.01", "allgather", 7e3)):
        x = StepInput(n=2, collective=coll, payload_bytes=payload, rate_mbit=20, compute_s=0)
        runs.append(_stats(method, coll, 2, payload, true.comm_s(x)))
    link = fit_link(runs)
    assert link.alpha_s == pytest.approx(0.004, rel=1e-6)
    assert link.eta == pytest.approx(0.8, rel=1e-6)


def test_prediction_input_uses_uncontended_compute() -> None:
    base = _stats("allreduce", "allreduce", 4, 1e5, 0.1)  # measured with 4 workers, 2 cores
    x = step_input(base, 8, cores=2)
    assert x.compute_s == pytest.approx(0.01) and x.n == 8 and x.payload_bytes == 1e5
