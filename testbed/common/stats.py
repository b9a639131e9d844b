"""The one place the testbed's statistics are defined: the 95 % Student-t interval of a
mean over seeds, the interval of a ratio of two means, and the resampling answers of an
A/B comparison (``netsense ab``): a bootstrap interval of the ratio and a permutation p.

Why here and pure Python: the tables, the figures and the simulation's error table all say
"mean +- 95 % interval"; with two copies of the t-table they disagreed once the seeds
outnumbered the table (one fell back to 1.96, the other to a series), so a figure and the
table beside it printed different intervals for the same runs. No numpy or scipy: any module
may use it, and three digits of t are all a seed count of 2-30 can carry.

* :func:`ci95` -- ``mean +- t(0.975, n-1) * sd / sqrt(n)`` over the finite values (no
  interval with one value);
* :func:`ratio_ci95` -- the ratio of two means with the delta-method t-interval on its
  logarithm, ``exp(log r +- t * sqrt(cv_a^2 / n_a + cv_b^2 / n_b))``, ``cv = sd / mean``,
  ``t = t(0.975, min(n_a, n_b) - 1)`` (conservative degrees of freedom).
* :func:`bootstrap_ratio` -- the same ratio with a percentile bootstrap interval: each arm
  resampled with replacement on its own (the arms are separate runs, not pairs), the ratio
  of the resampled means taken ``reps`` times, its 2.5 and 97.5 percentiles (linear
  interpolation between order statistics). Why beside the delta method: an A/B of a few
  seeds whose spread is skewed (one slow run) is what the delta method's normal
  approximation gets wrong, and the bootstrap assumes no shape; it is also the interval
  ``--until-width`` watches shrink.
* :func:`permutation_p` -- two-sided permutation test of equal means, statistic
  ``|mean(a) - mean(b)|``: the share of ways to split the pooled values into groups of the
  same sizes whose statistic is at least the observed one. Every split is counted when
  there are no more than ``reps`` of them (exact: two fully separated groups of 4 give 2 of
  C(8, 4)); beyond, ``reps`` random splits with ``(count + 1) / (reps + 1)``, which never
  says 0 for what a finite sample cannot rule out. No distribution assumed, which is the
  point with 4-16 seeds.

Both resample with their own ``random.Random(seed)``: the same values give the same
answer on every machine and every call.

* :func:`log_ratio_t` -- what ``netsense ab`` reports: the ratio of the two arms' geometric
  means, ``exp(mean(log a) - mean(log b))``, with Welch's t-interval on the logs (each arm
  its own variance, the Welch-Satterthwaite degrees of freedom, a real-valued t quantile
  from :func:`t_quantile`). Why not the bootstrap at a few seeds: resampling 2 values has 3
  distinct means per arm, so 2 + 2 seeds give an interval from a handful of points that
  knows nothing of the spread beyond them; it read 1.007 [0.913, 1.110] where each arm's own
  t-interval was +-61 %, and covered the true ratio in ~50 % of simulated 2 + 2 comparisons
  (``tests/common/test_stats.py``). The t-interval pays for a small n with its quantile
  (12.7 at one degree of freedom) and covers 95 % at 2, 3 and 6 seeds per arm when a run's
  metric is log-normal around its arm's value (times and rates are positive and
  multiplicative); the logs make the interval one of a ratio, not of a difference.
* :func:`seeds_to_tell` -- how many seeds per arm would make that interval exclude 1 if the
  observed difference and spread held: the least n with
  ``t(0.975, 2n - 2) * s * sqrt(2 / n) < |d|`` (``d`` the difference of the log means,
  ``s`` the arms' pooled sd of the logs). A planning figure, not a promise: at the n it
  names the interval excludes 1 about half the time.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

#: t(0.975, df) for df = 1..30; beyond, the Cornish-Fisher expansion of the normal quantile.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


class Interval(NamedTuple):
    """A mean, the half-width of its 95 % interval (NaN below two values), the count."""

    mean: float
    half: float
    n: int


class Ratio(NamedTuple):
    """A ratio of two means and its 95 % interval (NaN where it has none)."""

    ratio: float
    lo: float
    hi: float


def t975(df: int) -> float:
    """Two-sided 95 % Student-t quantile for ``df`` degrees of freedom; NaN for df < 1."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def finite(values: Iterable[Any]) -> list[float]:
    """The values that are finite numbers (or numeric strings), as floats; None, NaN, inf,
    booleans and text are left out, as a table's empty cells are."""
    out = []
    for v in values:
        if isinstance(v, bool) or v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def _mean_sd(v: list[float]) -> tuple[float, float]:
    m = sum(v) / len(v)
    return m, math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def ci95(values: Iterable[Any]) -> Interval:
    """Mean, 95 % t-interval half-width and count of the finite values (module doc)."""
    v = finite(values)
    n = len(v)
    if n == 0:
        return Interval(math.nan, math.nan, 0)
    if n == 1:
        return Interval(v[0], math.nan, 1)
    m, sd = _mean_sd(v)
    return Interval(m, t975(n - 1) * sd / math.sqrt(n), n)


def ratio_ci95(num: Iterable[Any], den: Iterable[Any]) -> Ratio:
    """mean(num) / mean(den) and its delta-method interval (module doc); NaN bounds with
    fewer than two values on a side, all NaN when a side is empty or not positive."""
    a, b = finite(num), finite(den)
    if not a or not b:
        return Ratio(math.nan, math.nan, math.nan)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    if not (ma > 0 and mb > 0):
        return Ratio(math.nan, math.nan, math.nan)
    r = ma / mb
    if len(a) < 2 or len(b) < 2:
        return Ratio(r, math.nan, math.nan)
    sa, sb = _mean_sd(a)[1], _mean_sd(b)[1]
    se = math.sqrt((sa / ma) ** 2 / len(a) + (sb / mb) ** 2 / len(b))
    h = t975(min(len(a), len(b)) - 1) * se
    return Ratio(r, r * math.exp(-h), r * math.exp(h))


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, linear between order statistics."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_ratio(a: Iterable[Any], b: Iterable[Any], *, reps: int = 10000, seed: int = 0
                    ) -> Ratio:
    """mean(a) / mean(b) and its 95 % percentile bootstrap interval (module doc); NaN
    bounds with fewer than two values in an arm, all NaN when an arm is empty or its mean
    not positive."""
    va, vb = finite(a), finite(b)
    if not va or not vb:
        return Ratio(math.nan, math.nan, math.nan)
    ma, mb = sum(va) / len(va), sum(vb) / len(vb)
    if not (ma > 0 and mb > 0):
        return Ratio(math.nan, math.nan, math.nan)
    r = ma / mb
    if len(va) < 2 or len(vb) < 2 or reps < 1:
        return Ratio(r, math.nan, math.nan)
    rng = random.Random(seed)
    na, nb = len(va), len(vb)
    draws = []
    for _ in range(reps):
        sb = sum(rng.choices(vb, k=nb))
        sa = sum(rng.choices(va, k=na))
        if sb > 0:  # a resample of non-positive values has no ratio; left out
            draws.append((sa / na) / (sb / nb))
    if not draws:
        return Ratio(r, math.nan, math.nan)
    draws.sort()
    return Ratio(r, _percentile(draws, 0.025), _percentile(draws, 0.975))


def permutation_p(a: Iterable[Any], b: Iterable[Any], *, reps: int = 10000, seed: int = 0
                  ) -> float:
    """Two-sided permutation p of equal means (module doc): exact when the splits number
    ``reps`` or fewer, else ``reps`` random splits; NaN when an arm is empty."""
    va, vb = finite(a), finite(b)
    if not va or not vb:
        return math.nan
    pooled = va + vb
    na, n = len(va), len(va) + len(vb)
    total = sum(pooled)

    def stat(sum_a: float) -> float:
        return abs(sum_a / na - (total - sum_a) / (n - na))

    observed = stat(sum(va))
    # sums taken in another order differ in the last bits: a split as extreme as the
    # observed one must count, so "at least" allows that rounding
    tol = 1e-9 * max(1.0, max(abs(x) for x in pooled))
    if math.comb(n, na) <= reps:
        hits = splits = 0
        for chosen in itertools.combinations(pooled, na):
            splits += 1
            hits += stat(sum(chosen)) >= observed - tol
        return hits / splits
    rng = random.Random(seed)
    hits = 0
    work = list(pooled)
    for _ in range(reps):
        rng.shuffle(work)
        hits += stat(sum(work[:na])) >= observed - tol
    return (hits + 1) / (reps + 1)


# ------------------------------------------------------------------ t on real-valued df
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 3e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    bt = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                  + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return bt * _betacf(a, b, x) / a
    return 1.0 - bt * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom (real-valued)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with real-valued ``df`` (bisection
    on :func:`t_cdf`); NaN for df <= 0."""
    if not df > 0 or not 0.5 < p < 1:
        return math.nan
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return 0.5 * (lo + hi)


def _logs(values: Iterable[Any]) -> list[float] | None:
    v = finite(values)
    if any(x <= 0 for x in v):
        return None
    return [math.log(x) for x in v]


def log_ratio_t(a: Iterable[Any], b: Iterable[Any]) -> Ratio:
    """Geometric mean of ``a`` over that of ``b`` and its 95 % Welch t-interval on the logs
    (module doc); NaN bounds with fewer than two values in an arm, all NaN when an arm is
    empty or holds a value that is not positive."""
    la, lb = _logs(a), _logs(b)
    if not la or not lb:
        return Ratio(math.nan, math.nan, math.nan)
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    r = math.exp(ma - mb)
    if len(la) < 2 or len(lb) < 2:
        return Ratio(r, math.nan, math.nan)
    va, vb = _mean_sd(la)[1] ** 2 / len(la), _mean_sd(lb)[1] ** 2 / len(lb)
    se2 = va + vb
    if se2 == 0:
        return Ratio(r, r, r)
    df = se2 ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    h = t_quantile(0.975, df) * math.sqrt(se2)
    return Ratio(r, math.exp(ma - mb - h), math.exp(ma - mb + h))


#: The most seeds :func:`seeds_to_tell` looks at; beyond, it answers None.
MAX_SEEDS_TO_TELL = 10000


def seeds_to_tell(a: Iterable[Any], b: Iterable[Any]) -> int | None:
    """Seeds per arm at which the log-ratio interval would exclude 1 if the observed
    difference and spread held (module doc); None when no difference was seen, an arm has
    fewer than two values, or more than :data:`MAX_SEEDS_TO_TELL` would be needed."""
    la, lb = _logs(a), _logs(b)
    if not la or not lb or len(la) < 2 or len(lb) < 2:
        return None
    d = abs(sum(la) / len(la) - sum(lb) / len(lb))
    if d == 0:
        return None
    s = math.sqrt(((len(la) - 1) * _mean_sd(la)[1] ** 2 + (len(lb) - 1) * _mean_sd(lb)[1] ** 2)
                  / (len(la) + len(lb) - 2))
    if s == 0:
        return 2
    n = 2
    while n <= MAX_SEEDS_TO_TELL:
        if t975(2 * n - 2) * s * math.sqrt(2.0 / n) < d:
            return n
        n = n + 1 if n < 64 else int(n * 1.05) + 1
    return None
