"""The one statistics helper: its numbers against hand-computed ones, and every user of an
interval reading this one definition."""

from __future__ import annotations

import math
import random

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


def test_permutation_p_of_two_separated_groups_of_four_is_two_of_seventy() -> None:
    """C(8, 4) = 70 splits; only the observed one and its mirror are as extreme."""
    p = stats.permutation_p([1.0, 2.0, 3.0, 4.0], [11.0, 12.0, 13.0, 14.0])
    assert p == pytest.approx(2 / 70, abs=1e-12)
    assert stats.permutation_p([11.0, 12.0, 13.0, 14.0], [1.0, 2.0, 3.0, 4.0]) == p


def test_permutation_p_of_identical_samples_is_one() -> None:
    assert stats.permutation_p([3.0, 5.0, 7.0], [3.0, 5.0, 7.0]) == 1.0
    assert math.isnan(stats.permutation_p([], [1.0]))


def test_permutation_p_by_enumeration_by_hand() -> None:
    """a = [1, 2], b = [3, 4]: |diff| 2; the 6 splits give 2, 1, 0, 0, 1, 2 -> 2/6."""
    assert stats.permutation_p([1.0, 2.0], [3.0, 4.0]) == pytest.approx(2 / 6)


def test_permutation_p_beyond_enumeration_is_monte_carlo_with_the_correction() -> None:
    a, b = [float(i) for i in range(10)], [float(i) + 100 for i in range(10)]
    # C(20, 10) = 184756 splits > 1000: random splits; none as extreme -> 1 / 1001, not 0
    assert stats.permutation_p(a, b, reps=1000, seed=3) == pytest.approx(1 / 1001)
    # the same values give the same answer; a null difference gives a large p
    c = [float(i % 5) for i in range(10)]
    d = [float((i + 2) % 5) for i in range(10)]
    p1 = stats.permutation_p(c, d, reps=2000, seed=1)
    assert p1 == stats.permutation_p(c, d, reps=2000, seed=1) and p1 > 0.9


def test_bootstrap_interval_contains_the_ratio_and_shrinks_with_more_seeds() -> None:
    base = [100.0, 104.0, 97.0, 101.0]
    arm = [120.0, 131.0, 115.0, 126.0]
    r4 = stats.bootstrap_ratio(arm, base)
    assert r4.ratio == pytest.approx((sum(arm) / 4) / (sum(base) / 4))
    assert r4.lo < r4.ratio < r4.hi
    r16 = stats.bootstrap_ratio(arm * 4, base * 4)  # the same spread, four times the seeds
    assert r16.ratio == pytest.approx(r4.ratio)
    assert r16.lo < r16.ratio < r16.hi
    assert (r16.hi - r16.lo) < 0.7 * (r4.hi - r4.lo)


def test_bootstrap_is_deterministic_under_its_seed_and_nan_where_it_has_no_interval() -> None:
    a, b = [3.1, 4.7, 6.2, 5.3, 3.9, 4.4], [2.0, 2.6, 2.1, 2.9, 2.4, 2.2]
    assert stats.bootstrap_ratio(a, b, seed=7) == stats.bootstrap_ratio(a, b, seed=7)
    assert stats.bootstrap_ratio(a, b, seed=7) != stats.bootstrap_ratio(a, b, seed=8)
    b = [2.0, 2.5, 2.0]
    one = stats.bootstrap_ratio([3.0], b)
    assert one.ratio == pytest.approx(3.0 / 6.5 * 3) and math.isnan(one.lo)
    assert math.isnan(stats.bootstrap_ratio([], b).ratio)
    assert math.isnan(stats.bootstrap_ratio([1.0, 2.0], [0.0, 0.0]).ratio)
    # resampled ratios of a constant arm against a constant arm: a zero-width interval
    const = stats.bootstrap_ratio([2.0, 2.0], [1.0, 1.0])
    assert (const.ratio, const.lo, const.hi) == (2.0, 2.0, 2.0)


# ------------------------------------------------- netsense ab's interval at a few seeds


def test_t_quantile_takes_real_degrees_of_freedom() -> None:
    for df, t in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042)):
        assert stats.t_quantile(0.975, df) == pytest.approx(t, abs=1e-3)
    assert stats.t975(1) < stats.t_quantile(0.975, 0.8)  # below one df, wider still
    assert 4.303 < stats.t_quantile(0.975, 1.5) < 12.706
    assert math.isnan(stats.t_quantile(0.975, 0))


def _coverage(fn, n: int, reps: int, sd_a: float, sd_b: float, seed: int) -> float:
    """The share of ``reps`` simulated comparisons of n + n seeds whose interval holds the
    true ratio 1.1: each run's value log-normal around its arm's (geometric) value."""
    rng = random.Random(seed)
    hits = 0
    for _ in range(reps):
        a = [110.0 * math.exp(rng.gauss(0, sd_a)) for _ in range(n)]
        b = [100.0 * math.exp(rng.gauss(0, sd_b)) for _ in range(n)]
        r = fn(a, b)
        hits += r.lo <= 1.1 <= r.hi
    return hits / reps


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("spread", [(0.1, 0.1), (0.05, 0.3)])
def test_the_ab_interval_covers_95_percent_at_2_3_and_6_seeds(n: int, spread) -> None:
    """netsense ab's interval (Welch's t on the logs) on a known distribution: 2000
    simulated comparisons (seeded) per case; 95 % +- 2 sampling errors (1 %), or more
    (a conservative interval is honest), never much less. Equal and very unequal spreads."""
    got = _coverage(stats.log_ratio_t, n, 2000, *spread, seed=11 * n)
    assert 0.93 <= got <= 0.99, (n, spread, got)


def test_the_bootstrap_it_replaced_covers_far_less_at_a_few_seeds() -> None:
    """Why ab no longer reports it: over 2 + 2 seeds the percentile bootstrap's "95 %"
    interval holds the true ratio in about two comparisons of three."""
    got = _coverage(lambda a, b: stats.bootstrap_ratio(a, b, reps=400), 2, 300, 0.1, 0.1, 5)
    assert got < 0.8, got


def test_seeds_to_tell_grows_as_the_difference_shrinks_against_the_spread() -> None:
    base = [100.0, 110.0, 95.0]
    assert stats.seeds_to_tell([130.0, 140.0, 125.0], base) <= 3  # told apart at 3 already
    assert stats.log_ratio_t([130.0, 140.0, 125.0], base).lo > 1
    small = stats.seeds_to_tell([104.0, 113.0, 99.0], base)
    smaller = stats.seeds_to_tell([101.0, 112.0, 96.0], base)
    assert small is not None and smaller is not None and 3 < small < smaller
    assert stats.seeds_to_tell(base, base) is None  # no difference seen
    assert stats.seeds_to_tell([1.0], base) is None  # one value: no spread to plan with
