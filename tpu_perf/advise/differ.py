"""Advisor findings that differ between runs: a rule that fired on some runs and not on others.

What the compare page shows under the verdict as the "why": a finding that fired on every run
explains nothing about the difference between them, and one that fired on one side only may.
Reads the findings as `advice_document` gives them (JSON dicts), so the dashboard and any other
view share one answer; no Streamlit, no formatting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpu_perf.advise.rules import SEVERITY_ORDER


@dataclass(frozen=True, kw_only=True)
class FindingDiff:
    """One rule whose outcome is "fired" on some runs only."""

    id: str
    title: str
    severity: str
    fired: tuple[str, ...]
    """Run labels where it fired, in the order given."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Why it fired, per run where it fired."""
    gains: dict[str, float | None] = field(default_factory=dict)
    """Expected step-time factor per run where it fired (None: no honest estimate)."""
    others: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Runs where it did not fire: (outcome, reason); `not_evaluable` means it could not be checked there."""


@dataclass(frozen=True, kw_only=True)
class FindingsCompared:
    differing: list[FindingDiff]
    """Fired on some runs only; most severe and largest expected gain first."""
    everywhere: list[str]
    """Rule ids that fired on every run (explain nothing about the difference)."""


def _gain(f: Mapping[str, Any]) -> float | None:
    factor = (f.get("expected_gain") or {}).get("factor")
    return float(factor) if factor is not None else None


def compare_findings(findings: Mapping[str, Sequence[Mapping[str, Any]]]) -> FindingsCompared:
    """`findings`: each run's full finding list (every rule, any outcome), by run label."""
    by_rule: dict[str, dict[str, Mapping[str, Any]]] = {}
    for label, items in findings.items():
        for f in items:
            by_rule.setdefault(str(f["id"]), {})[label] = f
    differing, everywhere = [], []
    for rule, per_run in by_rule.items():
        fired = tuple(label for label in findings if label in per_run and per_run[label]["outcome"] == "fired")
        if not fired:
            continue
        if len(fired) == len(findings):
            everywhere.append(rule)
            continue
        first = per_run[fired[0]]
        differing.append(FindingDiff(
            id=rule, title=str(first["title"]), severity=str(first["severity"]), fired=fired,
            reasons={label: str(per_run[label].get("reason") or "") for label in fired},
            gains={label: _gain(per_run[label]) for label in fired},
            others={label: (str(per_run[label]["outcome"]), per_run[label].get("reason")) if label in per_run else ("not_evaluable", "this rule did not run on it") for label in findings if label not in fired},
        ))  # fmt: skip
    differing.sort(key=lambda d: (SEVERITY_ORDER.get(d.severity, 3), -max((g for g in d.gains.values() if g is not None), default=1.0)))
    return FindingsCompared(differing=differing, everywhere=everywhere)
