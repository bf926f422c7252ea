"""Welch's comparison of two samples on their logs, and the Student t distribution it needs.

No SciPy: the CDF and its inverse work for any (non-integer) df. Why here: `tpu-perf check` runs in CI images that install only the core dependencies, and Welch's
degrees of freedom are not integers, so a lookup table will not do. The CDF is the regularised
incomplete beta function I_x(a, b) by its continued fraction (Lentz's method, as in Numerical
Recipes 3rd ed. §6.4), with x = df / (df + t^2), a = df/2, b = 1/2; the quantile inverts it by
safeguarded Newton steps. Accurate to ~1e-10 for df >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 500


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df > 0, not necessarily whole)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p: the critical value of a t test or interval (p in (0, 1)).

    Newton's method from the Cornish-Fisher start, kept inside a bracket that bisection narrows
    whenever a Newton step would leave it (so it cannot diverge in the heavy tails of small df)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must lie in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:  # bracket: the quantile grows without bound as df -> 0
        lo, hi = hi, hi * 2.0
    z = NormalDist().inv_cdf(p)
    t = min(max(z + (z**3 + z) / (4.0 * df), lo), hi)
    for _ in range(100):
        f = t_cdf(t, df) - p
        if f < 0:
            lo = t
        else:
            hi = t
        step = f / _t_pdf(t, df)
        nxt = t - step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - t) < 1e-12 * max(1.0, abs(t)):
            return nxt
        t = nxt
    return t


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
