"""The gate's verdict types, at the bottom of it: what each check answers (`Check`, `Verdict`), which
verdict wins when checks disagree, and the exit codes. The estimators (`decide`), the exact tier
(`exact`), pairs (`paired`) and the orchestration (`regression.check_sets`) sit above and import
these; nothing here imports them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    PASS = "PASS"
    IMPROVEMENT = "IMPROVEMENT"
    CHANGED = "CHANGED"
    """A deterministic number changed without being worse (TPU compile FLOPs): shown, not failed."""
    UNCHANGED = "UNCHANGED"
    """The compiled program is the same on both sides and the timing could not be judged here."""
    INCONCLUSIVE = "INCONCLUSIVE"
    REGRESSION = "REGRESSION"
    BAD_DATA = "BAD_DATA"
    NOT_COMPARABLE = "NOT_COMPARABLE"


PRECEDENCE: tuple[Verdict, ...] = (
    Verdict.NOT_COMPARABLE, Verdict.REGRESSION, Verdict.BAD_DATA, Verdict.INCONCLUSIVE,
    Verdict.IMPROVEMENT, Verdict.CHANGED, Verdict.UNCHANGED, Verdict.PASS,
)
"""When checks disagree, the first of these that any deciding check has is the overall verdict: a
definite REGRESSION in one metric is not hidden by another metric's BAD_DATA. One exception
(`overall`): runs that cannot be judged at all (failed, too few) are BAD_DATA before anything."""

EXIT_CODES: dict[Verdict, int] = {
    Verdict.PASS: 0, Verdict.IMPROVEMENT: 0, Verdict.CHANGED: 0, Verdict.UNCHANGED: 0, Verdict.REGRESSION: 1,
    Verdict.INCONCLUSIVE: 3, Verdict.BAD_DATA: 4, Verdict.NOT_COMPARABLE: 5,
}
"""Stable, documented in docs/ci.md: 2 is the CLI's usage error and never a verdict."""


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of the verdict: a metric (or the fingerprint, or the runs' health) and its answer."""

    name: str
    verdict: Verdict
    message: str
    unit: str | None = None
    lower_is_better: bool | None = None
    ratio: float | None = None
    """Candidate over baseline (geometric means for timed metrics, medians/maxima otherwise)."""
    low: float | None = None
    high: float | None = None
    """The ratio's interval: each end a one-sided (1 - alpha) bound."""
    baseline: tuple[float | None, ...] = ()
    candidate: tuple[float | None, ...] = ()
    """Per-run values, in run order."""
    baseline_value: float | None = None
    candidate_value: float | None = None
    """Each side's summary: geometric mean (timed metrics), median (memory), maximum (compiles)."""
    baseline_cv: float | None = None
    candidate_cv: float | None = None
    runs_needed: int | None = None
    """Runs per side that would likely decide an INCONCLUSIVE check (None: not inconclusive, or > 1000)."""
    method: str | None = None
    """How the interval was made: "per-run values" (Welch on logs) or "batch means" (one run a side)."""
    decides: bool = True
    """False: shown, but not part of the overall verdict (a steady metric when the basis is all-in)."""
    sample_sizes: tuple[int, int] | None = None
    """What the interval stands on, a side: runs (per-run values) or steps (batch means)."""
    detectable: float | None = None
    """The smallest slowdown (a fraction) these samples would call a REGRESSION `welch.POWER` of the
    time at their measured spread (`welch.detectable_change`); None for checks without an interval."""
    steps_needed: int | None = None
    """One run a side: steps a run that would likely decide an INCONCLUSIVE check (None: not one, or > 100000)."""
