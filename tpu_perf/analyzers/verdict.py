"""The verdict in words: which side is faster per step, by how much, on what basis, and what the
number leaves out. Values in, sentences out (no Streamlit, no store).

ONE verdict engine: the sentence is read off `regression.check_sets`' result, the code behind
`tpu-perf check`, so the compare page, `check` and the Markdown export say the same thing with the
same estimator, margin (3 %) and interval: per-run values for repeat groups, batch means over each
run's steps for one run a side (`analyzers.batch_means`). The speed claim stands on the result's
`basis`: the steady step time, or the all-in step time (`analyzers.all_in`) when a run's steady
sample is too small or leaves out too much. A failed or crashed run gets no ratio at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tpu_perf.analyzers.all_in import exclusions_text
from tpu_perf.analyzers.regression import CheckResult
from tpu_perf.analyzers.run_values import FINGERPRINT_FIELDS, RunValues
from tpu_perf.analyzers.verdicts import Check, Verdict

NO_DELTA_STATUSES: Mapping[str, str] = {
    "failed": "failed (its steps stop where the script raised)",
    "crashed": "crashed (the process died without closing the run)",
}
"""Statuses whose numbers are not compared: why, in words."""

Kind = Literal["faster", "slower", "same", "unclear", "unknown", "not_compared"]

BASIS_WORDS: Mapping[str, str] = {
    "step_time": "steady step time",
    "all_in_step_time": "all-in wall time per step (every step after the first)",
    "tpot_p50": "time per output token (median request)",
    "cpu_step_time": "CPU time per step (the process's, every thread)",
}


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
    verdict: Verdict | None = None
    """The basis check's verdict (what `tpu-perf check --json` says for that metric)."""
    basis: str | None = None
    headline: str = ""
    """The text without its evidence: who is faster and by how much (and a REGRESSION of another
    metric that fails the job first); the dashboard shows it first, `text` behind it."""


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _mfu(baseline: Sequence[RunValues], candidate: Sequence[RunValues]) -> str:
    if len(baseline) != 1 or len(candidate) != 1 or (baseline[0].mfu is None and candidate[0].mfu is None):
        return ""
    return f", MFU {_pct(baseline[0].mfu)} → {_pct(candidate[0].mfu)} (steady)"


def _interval(check: Check, result: CheckResult, *, slower: bool = False) -> str:
    """"90 % interval 5.10x–7.31x, batch means over 13 and 13 steps", in the sentence's terms: the
    speed-up where it says "faster", the slow-down (candidate / baseline) where it says "slower"."""
    level = f"{(1 - 2 * result.options.alpha) * 100:.0f} %"
    if check.low is None or check.high is None:
        return "no interval"
    lo, hi = sorted((check.low, check.high) if slower else (1 / check.high, 1 / check.low))
    n = check.sample_sizes or (len(check.baseline), len(check.candidate))
    how = f"over {n[0]} and {n[1]} runs" if check.method == "per-run values" else f"{check.method} over {n[0]} and {n[1]} steps"
    return f"{level} interval {_ratio(lo)}–{_ratio(hi)}, {how}"


def left_out(label: str, run: RunValues) -> str | None:
    """"bad's steady median leaves out 10 of 14 steps: 9 compiled a new program (1.2 s), ..."; None
    when it leaves out only what every run does (the first step, the unended last step)."""
    total = sum(e.steps for e in run.excluded)
    routine = sum(e.steps for e in run.excluded if e.reason == "tail") + min(1, sum(e.steps for e in run.excluded if e.reason == "warmup"))
    if total <= routine:
        return None
    tail = sum(e.steps for e in run.excluded if e.reason == "tail")
    steps = len(run.all_in_samples_s) + 1 + tail if run.all_in_samples_s else None  # the first step and the unended last one are not all-in samples
    of = f" of {steps}" if steps else ""
    return f"{label}'s steady median leaves out {total}{of} steps: {exclusions_text(run.excluded)}"


def speed_sentence(baseline: str, candidate: str, base_runs: Sequence[RunValues], cand_runs: Sequence[RunValues], result: CheckResult) -> Sentence:
    """One sentence on the candidate against the baseline, from `check_sets`' result on their runs."""
    a, b = baseline, candidate
    for label, runs in ((b, cand_runs), (a, base_runs)):
        broken = next((r for r in runs if r.status in NO_DELTA_STATUSES), None)
        if broken:
            return Sentence(candidate=b, baseline=a, kind="not_compared", text=f"{b} is not compared with {a}: {label} {NO_DELTA_STATUSES[broken.status]}.")
    check = next((c for c in result.checks if c.name == result.basis), None)
    common = {"candidate": b, "baseline": a, "basis": result.basis}
    if check is None or check.ratio is None:
        missing = [label for label, runs in ((a, base_runs), (b, cand_runs)) if any(r.step_s is None and r.all_in_s is None for r in runs)]
        why = f"no steady step time for {' and '.join(missing)}" if missing else (check.message if check else "no step time on a side")
        return Sentence(**common, kind="unknown", text=f"{b} vs {a}: {why}, so no speed comparison{_mfu(base_runs, cand_runs)}.", verdict=check.verdict if check else None)
    speedup = 1 / check.ratio
    per = " per output token" if result.basis == "tpot_p50" else " per step"
    low, high = (1 / check.high, 1 / check.low) if check.low and check.high else (None, None)
    margin = f"{result.options.margin:.0%}"
    looks = f"{_ratio(speedup)} faster" if speedup >= 1 else f"{_ratio(1 / speedup)} slower"
    kind: Kind
    if check.verdict == Verdict.IMPROVEMENT:
        kind, text = "faster", f"{b} is {looks}{per} than {a}"
    elif check.verdict == Verdict.REGRESSION:
        kind, text = "slower", f"{b} is {looks}{per} than {a}"
    elif check.verdict == Verdict.BAD_DATA:
        kind, text = "unclear", f"No clear winner: {b} looks {looks}{per} than {a}, but {check.message}"
    elif low is not None and high is not None and 1 / (1 + result.options.margin) <= low and high <= 1 + result.options.margin:
        kind, text = "same", f"{b} and {a} take the same time{per} within the {margin} margin ({b} is {_ratio(speedup)} as fast)"
    else:
        kind, text = "unclear", f"No clear winner: {b} looks {looks}{per} than {a}, but the interval reaches past the {margin} margin or includes no change"
    parts = [f"{BASIS_WORDS.get(result.basis, result.basis)}: {_interval(check, result, slower=speedup < 1)}"]
    if result.basis_reason:
        parts.append(f"the steady median is not used: {result.basis_reason}")
    if result.timing_reason:
        parts.append(result.timing_reason)
    if len(base_runs) == 1 and len(cand_runs) == 1:
        parts += [t for t in (left_out(a, base_runs[0]), left_out(b, cand_runs[0])) if t]
    parts += [f"but {c.name.replace('_', ' ')} is {c.verdict.value} ({c.message.split(':')[0]})" for c in result.checks if c.decides and c.name in ("step_time", "all_in_step_time") and c is not check and c.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) and c.verdict != check.verdict]
    tier = next((c for c in result.checks if c.verdict == Verdict.UNCHANGED), None)
    after = f" {tier.message[0].upper()}{tier.message[1:]}." if tier else ""
    head = f"{_leading(result, check)}{text}"
    return Sentence(**common, kind=kind, text=f"{head} ({'; '.join(parts)}){_mfu(base_runs, cand_runs)}.{after}", speedup=speedup, low=low, high=high, verdict=check.verdict, headline=head)


def _leading(result: CheckResult, basis: Check) -> str:
    """"REGRESSION in peak memory: 4.5 MiB -> 5.9 MiB (+30.0 %). Speed: " when a deciding check other
    than the speed basis makes the verdict a REGRESSION: the headline says what fails the job."""
    if result.verdict != Verdict.REGRESSION or basis.verdict == Verdict.REGRESSION:
        return ""
    failing = [c for c in result.checks if c.decides and c.verdict == Verdict.REGRESSION]
    def what(c: Check) -> str:
        head = c.message.split(" (")[0]
        pct = f"{(c.ratio - 1) * 100:+.1f} %" if c.ratio is not None else ""
        return head + (f" ({pct})" if pct and pct not in head else "")  # "all-in step time +10.5 %" says it already

    return "REGRESSION in " + "; ".join(map(what, failing)) + ". Speed: " if failing else ""


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
    "UNCHANGED": "the compiled program is unchanged; timing was not judged on this runner",
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
    meaning, the basis metric's change and every deciding check that did not pass."""
    shown = [c.message for c in result.checks if c.name == result.basis or (c.decides and c.verdict.value not in ("PASS", "IMPROVEMENT"))]
    sides = f"repeat={candidate} ({len(result.candidate_runs)} runs) against repeat={baseline} ({len(result.baseline_runs)} runs)"
    return f"{sides}: {result.verdict.value}, exit {result.exit_code} ({MEANINGS.get(result.verdict.value, '')}). " + "; ".join(dict.fromkeys(shown)) + "."
