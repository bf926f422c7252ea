"""The gate's decision rules on an interval, in numbers and words: which verdict an interval gives
against the margin, when a verdict stands above `--max-cv`, how many runs (pairs, steps) would
decide, and the smallest slowdown the samples at hand would catch. Shared by `regression` (runs a
side, steps a run) and `paired` (pairs), below both."""

from __future__ import annotations

import math

from tpu_perf.analyzers.verdicts import Verdict
from tpu_perf.analyzers.welch import POWER, Comparison, samples_needed, t_quantile


def needs(count: int | None, unit: str, *, cap: int = 1000) -> str:
    """"about 12 runs a side would decide it", from the measured spread and estimate."""
    return f"about {count} {unit} would decide it" if count else f"more than {cap} {unit} would be needed"


def hides(detectable: float, sample: str) -> str:
    """"at this noise, 5 and 5 runs catch a slowdown of +14.2 % or more 80 % of the time"."""
    return f"at this noise, {sample} catch a slowdown of {detectable_text(detectable)} or more {POWER * 100:.0f} % of the time"


def detectable_text(detectable: float) -> str:
    """"+14.2 %", or "10x" past a 10x slowdown (a few noisy runs measure their spread too loosely
    for a larger figure to mean anything)."""
    return "10x" if detectable >= 9 else percent(1 + detectable)


def sure(alpha: float) -> str:
    """How sure the strict interval above --max-cv is, a side: "99 %"."""
    return f"{1 - alpha / NOISY_STRICTNESS:.0%}"


def noisy_decision(verdict: Verdict, strict: Comparison, *, lower_is_better: bool, alpha: float, margin: float, noisy: str) -> tuple[Verdict, str] | None:
    """A verdict that stands above --max-cv, and why; None when the noise stops it. It stands when
    the interval at alpha / NOISY_STRICTNESS lies wholly beyond the margin (the ordinary verdict) or
    wholly within it (PASS)."""
    if beyond_margin(strict, margin=margin):
        return verdict, f"even its {sure(alpha)} bound ({percent(strict.low if strict.low > 1 else strict.high)}) is beyond the margin, so the {noisy} does not stop the verdict"
    if interval_verdict(strict, lower_is_better=lower_is_better, margin=margin, label="")[0] == Verdict.PASS:
        return Verdict.PASS, f"even its {sure(alpha)} interval ({percent(strict.low)} .. {percent(strict.high)}) is within the margin, so the {noisy} does not stop the verdict"
    return None


def interval_verdict(comp: Comparison, *, lower_is_better: bool, margin: float, label: str) -> tuple[Verdict, str]:
    """The module docstring's rules, on the "badness" log ratio (positive: the candidate is worse)."""
    sign = 1.0 if lower_is_better else -1.0
    bad = sign * math.log(comp.ratio)
    bad_lo, bad_hi = sorted((sign * math.log(comp.low), sign * math.log(comp.high)))
    limit = math.log1p(margin)
    change = f"{label} {percent(comp.ratio)} (interval {percent(comp.low)} .. {percent(comp.high)})"
    if bad > limit and bad_lo > 0:
        return Verdict.REGRESSION, f"{change}: worse with confidence, beyond the {margin:.0%} margin"
    if bad < -limit and bad_hi < 0:
        return Verdict.IMPROVEMENT, f"{change}: better with confidence, beyond the {margin:.0%} margin"
    if bad_hi <= limit:
        return Verdict.PASS, f"{change}: no worse than the {margin:.0%} margin"
    return Verdict.INCONCLUSIVE, f"{change}: the interval straddles the {margin:.0%} margin"


NOISY_STRICTNESS = 5
"""Above --max-cv a verdict still stands when the interval at alpha / this (99 % a side by default)
lies wholly beyond the margin: 3 runs a side at 9 % noise then call a 2x slowdown a REGRESSION every
time and an unchanged candidate a regression or improvement well under 1 % of the time
(bench/gate_noise.py)."""


def beyond_margin(comp: Comparison, *, margin: float) -> bool:
    """The whole interval lies beyond the margin, on either side: a decision whatever the noise."""
    limit = math.log1p(margin)
    low, high = math.log(comp.low), math.log(comp.high)
    return low > limit or high < -limit


def percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f} %"


def runs_needed(comp: Comparison, *, lower_is_better: bool, margin: float, alpha: float, cap: int = 1000) -> int | None:
    """Runs per side for the interval to stop straddling: half-width t(1-alpha, 2n-2) * s * sqrt(2/n)
    with n runs a side (s: pooled log sd)."""
    def half(n: int) -> float:
        return t_quantile(1 - alpha, 2 * n - 2) * comp.log_sd_pooled * math.sqrt(2 / n)

    return samples_needed(comp, half, lower_is_better=lower_is_better, margin=margin, cap=cap)
