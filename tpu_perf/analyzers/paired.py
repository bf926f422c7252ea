"""Paired runs: `check --pair-by tag:KEY` compares per-pair log ratios (a paired t interval).

On a shared CI machine the step time drifts with the machine (other jobs, thermal state, a noisy
neighbour): runs seconds apart share much of it. Recording baseline and candidate back to back and
tagging each pair (`--tag pair=<i>`) lets the check cancel that shared part: each pair gives one log
ratio log(candidate / baseline), and the interval is Student's t on those ratios (n - 1 degrees of
freedom, one-sided `alpha` at each end). The verdict words, margin and precedence are those of
`regression.interval_verdict`; `--max-cv` applies to the ratios' spread (what the pairing leaves),
not to each side's, which the shared factor inflates.

With 5 pairs, each sharing a +-30 % machine factor (per-side CV ~17 %) and 2 % noise of its own a
run, an unchanged candidate PASSes and a 10 % slower one is REGRESSION (bench/gate_noise.py gives
the rates); unpaired, the same runs are BAD_DATA.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tpu_perf.analyzers.welch import (
    Comparison,
    cv,
    detectable_change,
    geomean,
    samples_needed,
    t_quantile,
)

METHOD = "paired log ratios"


def pair_key(spec: str) -> str:
    """The tag KEY of `--pair-by tag:KEY`; ValueError naming the expected form otherwise."""
    if not spec.startswith("tag:") or not spec[4:] or "=" in spec:
        raise ValueError(f"--pair-by {spec}: expected tag:KEY (e.g. tag:pair, the tag each back-to-back pair of runs shares)")
    return spec[4:]


def match_pairs(baseline: Sequence[Any], candidate: Sequence[Any], key: str) -> tuple[list[tuple[Any, Any]], list[str]]:
    """(baseline run, candidate run) per value of tag KEY found once on each side, in the baseline's
    order; and a note per run left out (no tag, no partner, or the value twice on a side)."""
    def by_value(runs: Sequence[Any]) -> dict[str, list[Any]]:
        groups: dict[str, list[Any]] = {}
        for r in runs:
            value = _tags(r).get(key)
            if value is not None:
                groups.setdefault(str(value), []).append(r)
        return groups

    base, cand = by_value(baseline), by_value(candidate)
    pairs, notes = [], []
    for value, runs in base.items():
        partners = cand.get(value, [])
        if len(runs) == 1 and len(partners) == 1:
            pairs.append((runs[0], partners[0]))
        else:
            notes.append(f"{key}={value}: {len(runs)} baseline and {len(partners)} candidate run(s), not a pair")
    notes += [f"{key}={value}: no baseline run" for value in cand if value not in base]
    untagged = [r.run_id for r in (*baseline, *candidate) if _tags(r).get(key) is None]
    if untagged:
        notes.append(f"run(s) {', '.join(untagged)} have no tag {key}")
    return pairs, notes


def _tags(run: Any) -> Mapping[str, Any]:
    return getattr(run, "tags", None) or {}


def compare_pairs(baseline: Sequence[float], candidate: Sequence[float], *, alpha: float) -> Comparison:
    """exp(mean of log(c_i / b_i)) with a paired t interval (df = pairs - 1); >= 2 positive pairs."""
    d = np.log(np.asarray(candidate, dtype=float)) - np.log(np.asarray(baseline, dtype=float))
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0:
        return Comparison(ratio=math.exp(mean), low=math.exp(mean), high=math.exp(mean), log_se=0.0, df=None, log_sd_pooled=0.0)
    se = sd / math.sqrt(d.size)
    half = t_quantile(1 - alpha, d.size - 1) * se
    return Comparison(ratio=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half), log_se=se, df=float(d.size - 1), log_sd_pooled=sd)


def pairs_needed(comp: Comparison, *, lower_is_better: bool, margin: float, alpha: float, cap: int = 1000) -> int | None:
    """Pairs for the paired interval to stop straddling: half-width t(1-alpha, n-1) * sd / sqrt(n)."""
    def half(n: int) -> float:
        return t_quantile(1 - alpha, n - 1) * comp.log_sd_pooled / math.sqrt(n)

    return samples_needed(comp, half, lower_is_better=lower_is_better, margin=margin, cap=cap)


def paired_check(metric: Any, pairs: Sequence[tuple[Any, Any]], options: Any) -> Any:
    """The verdict on one timed metric from matched pairs of runs (`match_pairs`): the paired
    interval, `interval_verdict`'s words, `--max-cv` on the ratios (see the module docstring)."""
    from tpu_perf.analyzers.decide import (
        NOISY_STRICTNESS,
        hides,
        interval_verdict,
        needs,
        noisy_decision,
    )
    from tpu_perf.analyzers.verdicts import Check, Verdict

    base = tuple(metric.value(b) for b, _ in pairs)
    cand = tuple(metric.value(c) for _, c in pairs)
    common = {"name": metric.name, "unit": metric.unit, "lower_is_better": metric.lower_is_better, "baseline": base, "candidate": cand, "method": METHOD, "sample_sizes": (len(pairs), len(pairs))}
    if None in base or None in cand:
        return Check(**common, verdict=Verdict.BAD_DATA, message=f"{metric.label} unknown (n/a) in {sum(v is None for v in (*base, *cand))} run(s) of the pairs")
    if any(v <= 0 for v in (*base, *cand)):
        return Check(**common, verdict=Verdict.BAD_DATA, message=f"{metric.label} has a zero or negative value; cannot compare ratios")
    if len(pairs) < 2:
        return Check(**common, verdict=Verdict.BAD_DATA, message=f"{metric.label}: {len(pairs)} pair(s); need at least 2 (5 recommended) to measure the pairs' noise")
    comp = compare_pairs(base, cand, alpha=options.alpha)
    ratio_cv = math.sqrt(math.expm1(comp.log_sd_pooled**2))  # a log-normal's CV from its log sd
    numbers = {"ratio": comp.ratio, "low": comp.low, "high": comp.high, "baseline_value": geomean(base), "candidate_value": geomean(cand), "baseline_cv": cv(base), "candidate_cv": cv(cand)}
    verdict, message = interval_verdict(comp, lower_is_better=metric.lower_is_better, margin=options.margin, label=metric.label)
    spread = f"{len(pairs)} pairs; pair ratios' CV {ratio_cv:.1%} (each side's CV {cv(base):.1%} and {cv(cand):.1%}: what the pairing cancels)"
    sized = f"{len(pairs)} pairs"
    if ratio_cv > options.max_cv:
        strict_alpha = options.alpha / NOISY_STRICTNESS
        strict = compare_pairs(base, cand, alpha=strict_alpha)
        detect = detectable_change(strict, alpha=strict_alpha, margin=options.margin, strict=True)
        decided = noisy_decision(verdict, strict, lower_is_better=metric.lower_is_better, alpha=options.alpha, margin=options.margin, noisy=f"pair ratios' CV {ratio_cv:.1%}")
        if decided is not None:
            return Check(**common, **numbers, verdict=decided[0], message=f"{message}; {decided[1]}; {spread}", detectable=detect)
        needed = pairs_needed(strict, lower_is_better=metric.lower_is_better, margin=options.margin, alpha=strict_alpha)
        return Check(**common, **numbers, verdict=Verdict.BAD_DATA, runs_needed=needed, detectable=detect, message=f"{metric.label}: {spread}; the ratios' CV is above --max-cv {options.max_cv:.0%}: too noisy to judge ({message}); {hides(detect, sized)}; {needs(needed, 'pairs')} at this spread (at {1 - strict_alpha:.0%} a side, as above --max-cv), or a quieter runner")
    detect = detectable_change(comp, alpha=options.alpha, margin=options.margin)
    needed = pairs_needed(comp, lower_is_better=metric.lower_is_better, margin=options.margin, alpha=options.alpha) if verdict == Verdict.INCONCLUSIVE else None
    if verdict == Verdict.INCONCLUSIVE:
        message += f"; {needs(needed, 'pairs')}; {hides(detect, sized)}"
    return Check(**common, **numbers, verdict=verdict, message=f"{message}; {spread}", runs_needed=needed, detectable=detect)


def pairs_check(pairs: Sequence[tuple[Any, Any]], notes: Sequence[str], key: str) -> Any:
    """The pairing's health: BAD_DATA with fewer than 2 pairs (nothing to judge), naming the runs
    left out; PASS otherwise (left-out runs named, not judged)."""
    from tpu_perf.analyzers.verdicts import Check, Verdict

    left_out = f"; left out: {'; '.join(notes)}" if notes else ""
    if len(pairs) < 2:
        return Check(name="pairs", verdict=Verdict.BAD_DATA, message=f"{len(pairs)} pair(s) by tag {key}: need at least 2 (5 recommended); tag each back-to-back baseline and candidate run with `--tag {key}=<i>`{left_out}")
    return Check(name="pairs", verdict=Verdict.PASS, message=f"{len(pairs)} pairs by tag {key} (timed metrics on per-pair ratios){left_out}")
