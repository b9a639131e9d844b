"""The one place the testbed's statistics are defined: the 95 % Student-t interval of a
mean over seeds, and the interval of a ratio of two means.

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable
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
