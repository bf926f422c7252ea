"""Welch's comparison of two samples on their logs, and the Student t quantiles every interval of
`tpu-perf check` uses (scipy's t distribution: Welch's degrees of freedom are not whole numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

POWER = 0.8
"""The chance of detection at which the smallest detectable change is stated (power analysis's usual 80 %)."""


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p for Student's t with `df` (> 0, not necessarily whole) degrees of
    freedom: the critical value of a t test or interval (p in (0, 1))."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must lie in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    return float(stats.t.ppf(p, df))


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Welch's comparison of two samples of positive values, on their logs."""

    ratio: float
    low: float
    high: float
    log_se: float
    df: float | None
    log_sd_pooled: float


def cv(values: Sequence[float]) -> float | None:
    """Sample coefficient of variation (ddof=1); None with fewer than 2 values."""
    x = np.asarray(values, dtype=float)
    return float(np.std(x, ddof=1) / np.mean(x)) if x.size >= 2 and np.mean(x) != 0 else None


def geomean(values: Sequence[float]) -> float:
    """Geometric mean: the centre that matches a comparison of ratios."""
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def compare_samples(baseline: Sequence[float], candidate: Sequence[float], *, alpha: float) -> Comparison:
    """Ratio of geometric means (candidate/baseline) with a Welch t interval on log values."""
    x, y = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    d = float(y.mean() - x.mean())
    a, b = float(x.var(ddof=1)) / x.size, float(y.var(ddof=1)) / y.size
    se = math.sqrt(a + b)
    pooled = math.sqrt((float(x.var(ddof=1)) + float(y.var(ddof=1))) / 2)
    if se == 0:
        return Comparison(ratio=math.exp(d), low=math.exp(d), high=math.exp(d), log_se=0.0, df=None, log_sd_pooled=0.0)
    df = (a + b) ** 2 / (a * a / (x.size - 1) + b * b / (y.size - 1))
    half = t_quantile(1 - alpha, df) * se
    return Comparison(ratio=math.exp(d), low=math.exp(d - half), high=math.exp(d + half), log_se=se, df=df, log_sd_pooled=pooled)


def samples_needed(comp: Comparison, half_width: Callable[[int], float], *, lower_is_better: bool, margin: float, cap: int = 1000) -> int | None:
    """Smallest n whose interval half-width (log scale, `half_width(n)`) stops straddling the
    boundary the estimate is nearest to deciding, if the estimate and the spread stay as seen;
    None past `cap`. The paired and the two-sample checks differ only in `half_width`."""
    bad = (1.0 if lower_is_better else -1.0) * math.log(comp.ratio)
    limit = math.log1p(margin)
    gap = bad if bad > limit else limit - bad  # REGRESSION needs the low end above 0, PASS the high end below the margin
    if comp.log_sd_pooled == 0:
        return 2
    if gap <= 0 or not half_width(cap) < gap:
        return None
    lo, hi = 2, cap  # by bisection: the half-width shrinks with n
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if half_width(mid) < gap else (mid + 1, hi)
    return lo


def detectable_change(comp: Comparison, *, alpha: float, margin: float, power: float = POWER, strict: bool = False) -> float:
    """The smallest slowdown (a fraction: 0.12 is +12 %) that samples with this spread would call a
    REGRESSION with probability `power`. REGRESSION needs the estimate beyond the margin and the
    interval's near end beyond no change (`strict`: the near end beyond the margin, the rule above
    --max-cv), so the true log change must clear that threshold by t(power) standard errors."""
    limit = math.log1p(margin)
    if comp.log_se == 0 or comp.df is None:
        return margin
    t_alpha = t_quantile(1 - alpha, comp.df)
    threshold = limit + t_alpha * comp.log_se if strict else max(limit, t_alpha * comp.log_se)
    return math.expm1(threshold + t_quantile(power, comp.df) * comp.log_se)
