"""What a rule returns: one finding, with its outcome, evidence, fix and expected gain.

Plain frozen dataclasses; `tpu_perf.jsonio.to_jsonable` turns them into the JSON that
`tpu-perf advise --json` prints. A finding never carries rendered text with numbers baked in:
the evidence holds the numbers, the views format them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["high", "medium", "low"]
Outcome = Literal["fired", "passed", "not_evaluable"]
GainKind = Literal["estimate", "upper_bound", "none"]
"""`estimate`: this run's numbers with a model of the fix; `upper_bound`: the most the fix can give
(e.g. the waiting time removed entirely); `none`: no honest number (the basis says why)."""
Benefit = Literal["step_time", "compile_time", "memory", "throughput", "risk"]
"""What the fix improves. Only `step_time` findings are proposed as the next fix for a faster step;
the others go in the "also" list with their own figure."""


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One number a rule used. `name` carries the unit (`_s`, `_bytes`, `_fraction`, `_count`)."""

    name: str
    value: float | int | str | None
    source: str
    """Where it came from: `steps`, `compiles`, `hlo`, `trace`, `memory`, `runtime`, `manifest`, `chip`."""
    path: str
    """The report key (`compile.after_warmup`) or the table expression it was computed from."""


@dataclass(frozen=True, kw_only=True)
class Fix:
    summary: str
    jax: str | None = None
    """A short JAX snippet naming the real API or flag."""
    pytorch: str | None = None
    """The PyTorch / torch-tpu snippet, where the fix differs."""


@dataclass(frozen=True, kw_only=True)
class Gain:
    """Expected step-time factor (old step / new step) if the fix is applied; None: no honest estimate.

    A finding whose fix saves compile time or memory rather than step time has `benefit` saying so
    and its own figure in `amount` (`unit`: `compile_s`, `bytes`, `tokens_per_s_factor`)."""

    factor: float | None
    basis: str
    kind: GainKind
    benefit: Benefit = "step_time"
    amount: float | None = None
    unit: str | None = None


@dataclass(frozen=True, kw_only=True)
class Rule:
    """The fixed part of a rule: what it is about and how to fix it."""

    id: str
    title: str
    family: str
    severity: Severity
    fix: Fix
    docs: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Finding:
    id: str
    title: str
    family: str
    severity: Severity
    outcome: Outcome
    reason: str | None
    """Why it fired, passed, or could not be evaluated (and how to get the missing data)."""
    evidence: list[Evidence] = field(default_factory=list)
    fix: Fix | None = None
    expected_gain: Gain | None = None
    docs: tuple[str, ...] = ()

    @property
    def gain_factor(self) -> float | None:
        return self.expected_gain.factor if self.expected_gain else None

    @property
    def benefit(self) -> Benefit:
        return self.expected_gain.benefit if self.expected_gain else "step_time"


def fired(rule: Rule, reason: str, evidence: list[Evidence], gain: Gain | None, *, severity: Severity | None = None, fix: Fix | None = None) -> Finding:
    """`severity` overrides the rule's, for a finding judged for a target rather than seen on it;
    `fix` the rule's, where the run shows how its step is written (a `jax.pmap` step is not jitted).
    A fired finding always has an expected gain: without one, it says there is no number and why."""
    if gain is None:
        gain = Gain(factor=None, basis="this run's data gives no number for it (the evidence shows what was seen)", kind="none")
    return Finding(id=rule.id, title=rule.title, family=rule.family, severity=severity or rule.severity, outcome="fired", reason=reason, evidence=evidence, fix=fix or rule.fix, expected_gain=gain, docs=rule.docs)


def passed(rule: Rule, reason: str, evidence: list[Evidence] | None = None) -> Finding:
    return Finding(id=rule.id, title=rule.title, family=rule.family, severity=rule.severity, outcome="passed", reason=reason, evidence=evidence or [], docs=rule.docs)


def not_evaluable(rule: Rule, reason: str, evidence: list[Evidence] | None = None) -> Finding:
    """`evidence`: what was measured, where the rule could not tell what it means."""
    return Finding(id=rule.id, title=rule.title, family=rule.family, severity=rule.severity, outcome="not_evaluable", reason=reason, evidence=evidence or [], docs=rule.docs)


def ev(name: str, value: Any, source: str, path: str) -> Evidence:
    """Evidence with floats rounded for display stability (the raw value stays within 1e-9 relative)."""
    if isinstance(value, float):
        value = float(f"{value:.6g}")
    return Evidence(name=name, value=value, source=source, path=path)
