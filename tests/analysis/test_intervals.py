"""The tables' 95 % intervals over seeds: Student's t on the values, on the ratio's logs.

Pure arithmetic (it sat among the real sweep's tests, whose network it never used)."""

from __future__ import annotations

import math

import pytest

from testbed.analysis import tables


def test_intervals_are_student_t_over_seeds() -> None:
    mean, half, n = tables.ci95([10.0, 12.0, 14.0])
    assert (mean, n) == (12.0, 3)
    assert half == pytest.approx(4.303 * 2.0 / math.sqrt(3), rel=1e-3)
    assert math.isnan(tables.ci95([5.0])[1])
    r, lo, hi = tables.ratio_ci95([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (r, lo, hi) == (2.0, 2.0, 2.0)
    r, lo, hi = tables.ratio_ci95([9.0, 10.0, 11.0], [4.0, 5.0, 6.0])
    assert r == pytest.approx(2.0) and lo < 2.0 < hi
    assert tables.t975(1000) == pytest.approx(1.962, abs=1e-3)
