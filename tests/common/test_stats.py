"""The one statistics helper: its numbers against hand-computed ones, and every user of an
interval reading this one definition."""

from __future__ import annotations

import math

import pytest

from testbed.common import stats


def test_ci95_of_three_seeds_by_hand() -> None:
    mean, half, n = stats.ci95([10.0, 12.0, 14.0])  # sd 2, t(0.975, 2) = 4.303
    assert (mean, n) == (12.0, 3)
    assert half == pytest.approx(4.303 * 2 / math.sqrt(3))


def test_ci95_leaves_out_what_is_not_a_finite_number() -> None:
    assert stats.ci95([1.0, None, math.nan, math.inf, "x", True, 3.0]) == stats.ci95([1.0, 3.0])
    assert math.isnan(stats.ci95([5.0]).half) and stats.ci95([5.0]).mean == 5.0
    assert stats.ci95([]).n == 0


def test_beyond_the_table_t_follows_the_normal_quantile_series() -> None:
    """df > 30 (more than 31 seeds): the series, not 1.96; close to the exact quantiles."""
    assert stats.t975(30) == 2.042
    assert stats.t975(39) == pytest.approx(2.0227, abs=5e-4)
    assert stats.t975(120) == pytest.approx(1.9799, abs=5e-4)
    values = [float(i % 7) for i in range(40)]
    _, half, n = stats.ci95(values)
    sd = math.sqrt(sum((v - sum(values) / n) ** 2 for v in values) / (n - 1))
    assert half == pytest.approx(stats.t975(39) * sd / math.sqrt(n))


def test_ratio_interval_is_the_log_delta_method() -> None:
    r, lo, hi = stats.ratio_ci95([20.0, 22.0, 24.0], [10.0, 10.0, 13.0])
    assert r == pytest.approx(22.0 / 11.0)
    cv_a, cv_b = 2.0 / 22.0, math.sqrt(3.0) / 11.0
    h = stats.t975(2) * math.sqrt(cv_a**2 / 3 + cv_b**2 / 3)
    assert (lo, hi) == (pytest.approx(r * math.exp(-h)), pytest.approx(r * math.exp(h)))
    assert math.isnan(stats.ratio_ci95([1.0], [2.0]).lo)
    assert math.isnan(stats.ratio_ci95([1.0, 2.0], [0.0, 0.0]).ratio)


def test_tables_and_figures_read_the_same_interval() -> None:
    from testbed.analysis import plots, tables

    assert tables.ci95 is stats.ci95 and plots.ci95 is stats.ci95
    assert tables.ratio_ci95 is stats.ratio_ci95 and tables.t975 is stats.t975
