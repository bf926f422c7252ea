"""The compare page's first lines: which run is faster per step, by how much, and whether the
comparison is fair at all. Values in, sentences out (no Streamlit, no store).

The interval is Welch's (`welch.compare_samples`) on the logs of each run's steady per-step
iteration times: it says how sure the ratio is *within these two runs*. Steps of one run are not
independent draws of a fresh process, so run-to-run noise is not in it; `tpu-perf check` with
several runs a side (`--repeat`) measures that. A failed or crashed run gets no ratio at all: its
steps stop where it broke, so "faster" would be a statement about a run that did not finish.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tpu_perf.analyzers.regression import CheckResult
from tpu_perf.analyzers.run_values import FINGERPRINT_FIELDS
from tpu_perf.analyzers.welch import compare_samples

NO_DELTA_STATUSES: Mapping[str, str] = {
    "failed": "failed (its steps stop where the script raised)",
    "crashed": "crashed (the process died without closing the run)",
}
"""Statuses whose numbers are not compared: why, in words."""

CONFIDENCE = 0.95
"""Two-sided level of the per-step interval."""

Kind = Literal["faster", "slower", "same", "unclear", "unknown", "not_compared"]

SAME_WIDTH = 1.10
"""An interval around 1 narrower than this (high / low) says "the same"; a wider one says "unclear"."""


@dataclass(frozen=True, kw_only=True)
class Side:
    """One run as the verdict needs it."""

    label: str
    status: str
    steady_s: tuple[float, ...]
    """Steady-state per-step iteration times in seconds (warm-up, compiled, traced steps left out)."""
    median_s: float | None
    mfu: float | None


@dataclass(frozen=True, kw_only=True)
class Sentence:
    """The verdict on one candidate against the baseline."""

    candidate: str
    baseline: str
    kind: Kind
    text: str
    speedup: float | None = None
    """Baseline step time / candidate step time (> 1: the candidate is faster); None when unknown."""
    low: float | None = None
    high: float | None = None


def no_delta_reason(side: Side) -> str | None:
    """Why no number of this run is compared (failed, crashed); None when it can be."""
    return NO_DELTA_STATUSES.get(side.status)


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _mfu(baseline: Side, candidate: Side) -> str:
    if baseline.mfu is None and candidate.mfu is None:
        return ""
    return f", MFU {_pct(baseline.mfu)} → {_pct(candidate.mfu)}"


def _usable(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(v for v in values if v is not None and math.isfinite(v) and v > 0)


def compare_steps(baseline: Side, candidate: Side) -> Sentence:
    """One sentence: "B is 1.38x faster per step than A (1.31–1.45x), MFU 41.0 % → 56.0 %"."""
    a, b = baseline.label, candidate.label
    for side in (candidate, baseline):
        reason = no_delta_reason(side)
        if reason:
            return Sentence(candidate=b, baseline=a, kind="not_compared", text=f"{b} is not compared with {a}: {side.label} {reason}.")
    base, cand = _usable(baseline.steady_s), _usable(candidate.steady_s)
    if len(base) >= 2 and len(cand) >= 2:
        comp = compare_samples(base, cand, alpha=(1 - CONFIDENCE) / 2)
        speedup, low, high = 1 / comp.ratio, 1 / comp.high, 1 / comp.low
        steps = f"over {len(base)} and {len(cand)} steady steps"
    elif baseline.median_s and candidate.median_s:
        speedup, low, high = baseline.median_s / candidate.median_s, None, None
        steps = "from the medians; too few steady steps for an interval"
    else:
        missing = " and ".join(s.label for s in (baseline, candidate) if not s.median_s and len(_usable(s.steady_s)) < 2)
        return Sentence(candidate=b, baseline=a, kind="unknown", text=f"{b} vs {a}: no steady step time for {missing}, so no speed comparison{_mfu(baseline, candidate)}.")

    def note(lo: float | None, hi: float | None) -> str:
        return steps if lo is None or hi is None else f"{CONFIDENCE * 100:.0f} % interval {_ratio(lo)}–{_ratio(hi)} {steps}"

    kind: Kind
    if low is not None and high is not None and low <= 1 <= high and high / low <= SAME_WIDTH:
        kind, text = "same", f"{b} and {a} take the same time per step within noise ({b} is {_ratio(speedup)} as fast; {note(low, high)})"
    elif low is not None and high is not None and low <= 1 <= high:
        looks, shown = (f"{_ratio(speedup)} faster", (low, high)) if speedup >= 1 else (f"{_ratio(1 / speedup)} slower", (1 / high, 1 / low))
        kind, text = "unclear", f"No clear winner: {b} looks {looks} per step than {a}, but the {note(*shown)} includes no change; more steps would decide it"
    elif speedup >= 1:
        kind, text = "faster", f"{b} is {_ratio(speedup)} faster per step than {a} ({note(low, high)})"
    else:
        slow = (None, None) if low is None or high is None else (1 / high, 1 / low)
        kind, text = "slower", f"{b} is {_ratio(1 / speedup)} slower per step than {a} ({note(*slow)})"
    return Sentence(candidate=b, baseline=a, kind=kind, text=text + _mfu(baseline, candidate) + ".", speedup=speedup, low=low, high=high)


def differing_fields(fingerprints: Mapping[str, Mapping[str, str | None]]) -> dict[str, dict[str, str]]:
    """{field: {run: value}} for each `run_values.fingerprint` field whose value is not the same in
    every run (unknown counts as a value: "n/a" against "v5e" is a difference)."""
    out = {}
    for key in FINGERPRINT_FIELDS:
        values = {label: str(fp.get(key) or "n/a") for label, fp in fingerprints.items()}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def mismatch_text(diffs: Mapping[str, Mapping[str, str]], limit: int = 40) -> str | None:
    """One line naming what differs between the runs, each run's value shortened; None when nothing does."""
    if not diffs:
        return None

    def short(value: str) -> str:
        return value if len(value) <= limit else value[: limit - 1] + "…"

    parts = [f"{key} ({', '.join(f'{label}: {short(v)}' for label, v in values.items())})" for key, values in diffs.items()]
    return f"Not a like-for-like comparison: the runs differ in {'; '.join(parts)}."


REPEAT_TAG = "repeat"
"""`tpu-perf record --repeat N` tags its runs `repeat=<group>`: one group is one side of a check."""

MEANINGS: Mapping[str, str] = {
    "PASS": "no worse than the margin, with confidence",
    "IMPROVEMENT": "better beyond the margin, with confidence",
    "CHANGED": "a compile metric changed that is not a failure",
    "REGRESSION": "worse with confidence, beyond the margin: a CI gate fails",
    "INCONCLUSIVE": "the interval straddles the margin: record more runs",
    "BAD_DATA": "the runs cannot be judged (too few, too noisy, failed, or too few steps)",
    "NOT_COMPARABLE": "the two sides ran on or with different things",
}
"""What each `tpu-perf check` verdict means (docs/ci.md, "Verdicts and exit codes")."""


def repeat_groups(tags: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """{group: run labels} of the runs tagged `repeat=<group>`, in the runs' order."""
    groups: dict[str, list[str]] = {}
    for label, run_tags in tags.items():
        group = run_tags.get(REPEAT_TAG)
        if group:
            groups.setdefault(str(group), []).append(label)
    return groups


def group_sentence(baseline: str, candidate: str, result: CheckResult) -> str:
    """`tpu-perf check`'s answer for two repeat groups as one line: verdict, exit code and its
    meaning, the step-time change and every check that did not pass."""
    shown = [c.message for c in result.checks if c.name == "step_time" or c.verdict.value not in ("PASS", "IMPROVEMENT")]
    sides = f"repeat={candidate} ({len(result.candidate_runs)} runs) against repeat={baseline} ({len(result.baseline_runs)} runs)"
    return f"{sides}: {result.verdict.value}, exit {result.exit_code} ({MEANINGS.get(result.verdict.value, '')}). " + "; ".join(dict.fromkeys(shown)) + "."
