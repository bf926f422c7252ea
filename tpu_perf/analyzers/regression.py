"""Regression verdicts between two sets of runs: statistics, rules and exit codes (no I/O, no rich).

The unit of replication is a fresh-process run: each run gives one value per metric (its
steady-state median), and the noise that matters is between runs, not between steps. For a timed
metric the check compares the geometric means of the two sides by the ratio candidate/baseline,
with a Welch t interval on the log values (one-sided `alpha` at each end):

- REGRESSION: worse with confidence (the interval excludes "no change") and the estimated change
  is beyond the margin;
- IMPROVEMENT: the mirror image; PASS: no worse than the margin with confidence;
- INCONCLUSIVE: neither; the check says how many runs per side would decide it;
- BAD_DATA: too few runs, run-to-run CV above `max_cv`, failed runs, too few steady steps;
- NOT_COMPARABLE: the runs' fingerprints differ (chip, count, framework versions, flags, workload...);
- UNCHANGED: timing could not be judged on this runner (BAD_DATA from noise, or INCONCLUSIVE), but
  the compiled program is the same on both sides (`program_tier`): exit 0 unless `require_timing`.

Why "estimate beyond the margin" and not "lower bound beyond the margin": with 5 runs a side at 2 %
run-to-run noise, the stricter rule detects a 6 % slowdown only about 65 % of the time, while this
one detects it 98.5 % of the time with 0.98 % false alarms when nothing changed
(bench/gate_noise.py measures both numbers by calling `check_metric`).
Peak memory and compiles after warm-up are deterministic: compared directly, without statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from tpu_perf.analyzers import batch_means
from tpu_perf.analyzers.decide import (
    NOISY_STRICTNESS,
    hides,
    interval_verdict,
    needs,
    noisy_decision,
    percent,
    runs_needed,
    sure,
)
from tpu_perf.analyzers.exact import EXACT_METRICS, LABELS, exact_checks
from tpu_perf.analyzers.run_values import FINGERPRINT_FIELDS, RunValues
from tpu_perf.analyzers.tier import program_tier
from tpu_perf.analyzers.timing import CPU_METRIC, TIMINGS, cpu_timing
from tpu_perf.analyzers.verdicts import EXIT_CODES, PRECEDENCE, Check, Verdict
from tpu_perf.analyzers.welch import (
    compare_samples,
    cv,
    detectable_change,
    geomean,
    samples_needed,
    t_quantile,
)

SCHEMA_VERSION = 2
"""Version of `CheckResult.to_dict()` (the `--json` document and what the dashboard reads).
2: the verdict UNCHANGED (exit 0), `broken`, and per check `detectable_change` and `steps_needed`."""


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """How strict the check is; the defaults suit 5 runs a side at a few percent noise."""

    alpha: float = 0.05
    """One-sided error rate of each end of the interval."""
    margin: float = 0.03
    """Practical margin: changes smaller than this are not worth failing a build for."""
    max_cv: float = 0.05
    """Run-to-run coefficient of variation above which a side's numbers are BAD_DATA."""
    memory_margin: float = 0.01
    """Peak memory increase that counts as a regression (deterministic, no statistics)."""
    min_steady_steps: int = 5
    """Steady-state steps a run needs for its median to mean anything."""
    metrics: tuple[str, ...] | None = None
    """Metric names to check; None: the defaults (see `default_metrics`)."""
    ignore_fingerprint: tuple[str, ...] = ()
    """Fingerprint fields allowed to differ (a known version bump)."""
    inconclusive_ok: bool = False
    """INCONCLUSIVE exits 0 instead of 3."""
    require_timing: bool = False
    """No UNCHANGED: an unchanged program whose timing cannot be judged keeps the timing's verdict
    (BAD_DATA 4, INCONCLUSIVE 3) instead of exiting 0 (`--require-timing`)."""
    pair_by: str | None = None
    """Tag KEY that pairs baseline and candidate runs recorded back to back (`--pair-by tag:KEY`):
    timed metrics are judged on per-pair log ratios (`analyzers.paired`)."""
    timing: str = "wall"
    """The clock the steady step is timed by (`--timing`): `wall`, the iteration; `cpu`, the
    process's CPU time per step where every run ran on a CPU and computed through its step, else
    wall time, the check saying which and why (`analyzers.timing`)."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"--alpha {self.alpha}: must lie in (0, 0.5), e.g. 0.05")
        for name in ("margin", "max_cv", "memory_margin"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be a fraction in [0, 1), e.g. 0.03 for 3 %")
        if self.timing not in TIMINGS:
            raise ValueError(f"--timing {self.timing}: one of {', '.join(TIMINGS)}")
        unknown = [f for f in self.ignore_fingerprint if f not in FINGERPRINT_FIELDS]
        if unknown:
            raise ValueError(f"--ignore-fingerprint {', '.join(unknown)}: unknown field; one of {', '.join(FINGERPRINT_FIELDS)}")
        known = {m.name for m in METRICS} | set(AOT_METRICS) | set(EXACT_METRICS)
        bad = [m for m in self.metrics or () if m not in known]
        if bad:
            raise ValueError(f"--metric {', '.join(bad)}: unknown metric; one of {', '.join(sorted(known))}")


@dataclass(frozen=True, kw_only=True)
class Metric:
    name: str
    label: str
    unit: str
    lower_is_better: bool
    value: Callable[[RunValues], float | None]
    statistical: bool
    """True: noisy, judged by the interval; False: deterministic, compared directly."""
    samples: Callable[[RunValues], tuple[float, ...]] | None = None
    """A single run's steps behind the value (for a batch-means interval with one run a side)."""
    geometric: bool = True
    """Single runs: compare geometric means of the steps (True) or plain means (False: all-in)."""
    steady: bool = False
    """Stands on the steady median: does not decide when a run's comparison must be all-in."""
    sample: str = "steps"
    """What `samples` are, in the messages (`requests` for a TPOT: one per request)."""


METRICS: tuple[Metric, ...] = (
    Metric(name="mfu", label="MFU", unit="fraction", lower_is_better=False, value=lambda r: r.mfu, statistical=True, steady=True),
    Metric(name="step_time", label="step time", unit="s", lower_is_better=True, value=lambda r: r.step_s, statistical=True, steady=True, samples=lambda r: r.steady_samples_s),
    Metric(name=CPU_METRIC, label="CPU time per step", unit="s", lower_is_better=True, value=lambda r: r.cpu_step_s, statistical=True, steady=True, samples=lambda r: r.cpu_samples_s),
    Metric(name="all_in_step_time", label="all-in step time", unit="s", lower_is_better=True, value=lambda r: r.all_in_s, statistical=True, samples=lambda r: r.all_in_samples_s, geometric=False),
    Metric(name="tokens_per_s", label="tokens/s", unit="tokens/s", lower_is_better=False, value=lambda r: r.tokens_per_s, statistical=True, steady=True),
    Metric(name="peak_memory", label="peak memory", unit="bytes", lower_is_better=True, value=lambda r: r.peak_memory_bytes, statistical=False),
    Metric(name="compiles", label="compiles after warm-up", unit="count", lower_is_better=True, value=lambda r: r.compiles_after_warmup, statistical=False),
    Metric(name="ttft_p99", label="TTFT p99", unit="s", lower_is_better=True, value=lambda r: r.ttft_p99_s, statistical=True),
    Metric(name="tpot_p50", label="TPOT p50", unit="s", lower_is_better=True, value=lambda r: r.tpot_p50_s, statistical=True, samples=lambda r: r.tpot_samples_s, sample="requests"),
    Metric(name="generated_tokens_per_s", label="generated tokens/s", unit="tokens/s", lower_is_better=False, value=lambda r: r.generated_tokens_per_s, statistical=True),
    Metric(name="mbu", label="MBU", unit="fraction", lower_is_better=False, value=lambda r: r.mbu, statistical=True),
)
SERVING_METRICS: tuple[str, ...] = ("ttft_p99", "tpot_p50", "generated_tokens_per_s", "mbu")
"""A generation run's metrics (the report's `inference` section), checked by default where every
run has them; a single run a side has an interval for TPOT only (over its requests)."""
METRIC_BY_NAME = {m.name: m for m in METRICS}

AOT_METRICS: tuple[str, ...] = ("aot_peak_hbm", "aot_flops", "aot_step_estimate")
"""TPU compile metrics per topology (the report's `aot` section), compared exactly. The estimate is
the TPU compiler's own step time (`optimal_seconds` of its cost analysis: v6e and v5p give one,
v5e does not): CHANGED with its ratio, never a failure (a model, not a measurement)."""


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    verdict: Verdict
    exit_code: int
    checks: tuple[Check, ...]
    options: CheckOptions
    baseline_runs: tuple[str, ...] = ()
    candidate_runs: tuple[str, ...] = ()
    differing_fields: tuple[str, ...] = ()
    basis: str = "step_time"
    """The timed metric the speed verdict stands on: step_time, or all_in_step_time when a run's
    steady sample is too small or leaves out too much (`all_in.needs_all_in`)."""
    basis_reason: str | None = None
    """Why the basis is all-in, naming the run(s); None on the steady basis."""
    timing_reason: str | None = None
    """With `--timing cpu`: which clock timed the steady step (CPU time per step, `cpu_step_time`,
    or wall time) and why (`analyzers.timing.cpu_timing`); None with wall time asked for."""
    sentence: str | None = None
    """The verdict in words (`verdict.speed_sentence`), set by whoever knows the sides' names."""
    commits: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    """The git shas each side's runs recorded (baseline, candidate): which code ran."""
    broken: tuple[str, ...] = ()
    """The sides ("baseline", "candidate") with a run that did not complete: whose failure it is."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "verdict": self.verdict, "exit_code": self.exit_code,
            "baseline_runs": list(self.baseline_runs), "candidate_runs": list(self.candidate_runs),
            "differing_fields": list(self.differing_fields), "basis": self.basis, "basis_reason": self.basis_reason, "timing_reason": self.timing_reason, "sentence": self.sentence,
            "commits": {"baseline": list(self.commits[0]), "candidate": list(self.commits[1])}, "broken": list(self.broken),
            "options": asdict(self.options),
            "checks": [_check_dict(c) for c in self.checks],
        }


def _check_dict(check: Check) -> dict[str, Any]:
    return {
        "metric": check.name, "verdict": check.verdict, "ratio": check.ratio,
        "interval": [check.low, check.high] if check.low is not None else None,
        "baseline_value": check.baseline_value, "candidate_value": check.candidate_value,
        "baseline": list(check.baseline), "candidate": list(check.candidate),
        "baseline_cv": check.baseline_cv, "candidate_cv": check.candidate_cv,
        "runs_needed": check.runs_needed, "unit": check.unit, "lower_is_better": check.lower_is_better,
        "method": check.method, "sample_sizes": list(check.sample_sizes) if check.sample_sizes else None,
        "detectable_change": check.detectable, "steps_needed": check.steps_needed,
        "decides": check.decides, "message": check.message,
    }


def check_metric(metric: Metric, baseline: Sequence[float | None], candidate: Sequence[float | None], options: CheckOptions, *, steps: tuple[Sequence[float], Sequence[float]] | None = None) -> Check:
    """The verdict on one metric from per-run values: the function `check` and the noise bench share.
    `steps`: one run a side, the steps behind each value (an interval by batch means over them)."""
    base, cand = tuple(baseline), tuple(candidate)
    common = {"name": metric.name, "unit": metric.unit, "lower_is_better": metric.lower_is_better, "baseline": base, "candidate": cand}
    missing = [f"{sum(v is None for v in values)} of {len(values)} {side} runs" for side, values in (("baseline", base), ("candidate", cand)) if not values or None in values]
    if missing:
        return Check(**common, verdict=Verdict.BAD_DATA, message=f"{metric.label} unknown (n/a) on {' and '.join(missing)}")
    if not metric.statistical:
        return _deterministic_check(metric, base, cand, options, common)
    if steps is not None and len(base) == len(cand) == 1:
        return _single_run_check(metric, steps, options, common)
    return _statistical_check(metric, base, cand, options, common)  # type: ignore[arg-type]


def _single_run_check(metric: Metric, steps: tuple[Sequence[float], Sequence[float]], options: CheckOptions, common: dict[str, Any]) -> Check:
    """One run a side: the interval over each run's steps (or requests: `metric.sample`) by batch means (`analyzers.batch_means`)."""
    unit = metric.sample
    b, c = (np.asarray(side, dtype=float) for side in steps)
    b, c = b[b > 0], c[c > 0]  # NaN is not > 0 either
    comp = batch_means.compare_runs(b, c, alpha=options.alpha, geometric=metric.geometric)
    if comp is None:
        return Check(**common, verdict=Verdict.BAD_DATA, method=batch_means.METHOD, message=f"{metric.label}: {len(b)} and {len(c)} {unit}, too few for an interval over {unit} (4 a run at least); {'serve more requests' if unit == 'requests' else 'run more steps'} or record `--repeat`")
    center = (lambda v: geomean(v)) if metric.geometric else (lambda v: float(np.mean(v)))
    numbers = {"ratio": comp.ratio, "low": comp.low, "high": comp.high, "baseline_value": center(b), "candidate_value": center(c)}
    verdict, message = interval_verdict(comp, lower_is_better=metric.lower_is_better, margin=options.margin, label=metric.label)
    detect = detectable_change(comp, alpha=options.alpha, margin=options.margin)
    needed = None
    if verdict == Verdict.INCONCLUSIVE:
        steps = min(len(b), len(c))  # the half-width shrinks about as 1/sqrt(steps) at a fixed batch count
        needed = samples_needed(comp, lambda n: t_quantile(1 - options.alpha, comp.df or 1) * comp.log_se * math.sqrt(steps / n), lower_is_better=metric.lower_is_better, margin=options.margin, cap=100_000)
        message += f"; {needs(needed, f'{unit} a run', cap=100_000)}; {hides(detect, f'{len(b)} and {len(c)} {unit}')}"
    message += f"; {batch_means.METHOD} over {len(b)} and {len(c)} {unit} (one run a side: run-to-run noise not in the interval)"
    return Check(**common, **numbers, verdict=verdict, message=message, method=batch_means.METHOD, sample_sizes=(len(b), len(c)), detectable=detect, steps_needed=needed)


def _statistical_check(metric: Metric, base: tuple[float, ...], cand: tuple[float, ...], options: CheckOptions, common: dict[str, Any]) -> Check:
    if any(v <= 0 for v in (*base, *cand)):
        return Check(**common, verdict=Verdict.BAD_DATA, message=f"{metric.label} has a zero or negative value; cannot compare ratios")
    common = {**common, "method": "per-run values", "sample_sizes": (len(base), len(cand))}
    cvs = {"baseline_cv": cv(base), "candidate_cv": cv(cand)}
    short = [f"{side} has {len(v)} run" for side, v in (("baseline", base), ("candidate", cand)) if len(v) < 2]
    if short:
        return Check(**common, **cvs, verdict=Verdict.BAD_DATA, message=f"{'; '.join(short)}: need at least 2 a side (5 recommended) to measure noise")
    noisy = [f"{side} CV {value:.1%}" for side, value in (("baseline", cvs["baseline_cv"]), ("candidate", cvs["candidate_cv"])) if value is not None and value > options.max_cv]
    comp = compare_samples(base, cand, alpha=options.alpha)
    numbers = {**cvs, "ratio": comp.ratio, "low": comp.low, "high": comp.high, "baseline_value": geomean(base), "candidate_value": geomean(cand)}
    verdict, message = interval_verdict(comp, lower_is_better=metric.lower_is_better, margin=options.margin, label=metric.label)
    sized = f"{len(base)} and {len(cand)} runs"
    if noisy:
        strict = compare_samples(base, cand, alpha=options.alpha / NOISY_STRICTNESS)
        detect = detectable_change(strict, alpha=options.alpha / NOISY_STRICTNESS, margin=options.margin, strict=True)
        decided = noisy_decision(verdict, strict, lower_is_better=metric.lower_is_better, alpha=options.alpha, margin=options.margin, noisy=", ".join(noisy))
        if decided is not None:  # noise did not prevent the decision
            return Check(**common, **numbers, verdict=decided[0], message=f"{message}; {decided[1]}", detectable=detect)
        needed = runs_needed(strict, lower_is_better=metric.lower_is_better, margin=options.margin, alpha=options.alpha / NOISY_STRICTNESS)
        return Check(**common, **numbers, verdict=Verdict.BAD_DATA, runs_needed=needed, detectable=detect, message=f"{metric.label}: {', '.join(noisy)} above --max-cv {options.max_cv:.0%}: too noisy to judge ({percent(comp.ratio)}, interval {percent(comp.low)} .. {percent(comp.high)}); {hides(detect, sized)}; {needs(needed, 'runs a side')} (at {sure(options.alpha)} a side, as above --max-cv); that is the machine's run-to-run noise, not the code: record the sides in back-to-back pairs and check with --pair-by tag:pair (docs/ci.md), or use a quieter runner")
    detect = detectable_change(comp, alpha=options.alpha, margin=options.margin)
    needed = runs_needed(comp, lower_is_better=metric.lower_is_better, margin=options.margin, alpha=options.alpha) if verdict == Verdict.INCONCLUSIVE else None
    if verdict == Verdict.INCONCLUSIVE:
        message += f"; {needs(needed, 'runs a side')}; {hides(detect, sized)}"
    return Check(**common, **numbers, verdict=verdict, message=message, runs_needed=needed, detectable=detect)


def _deterministic_check(metric: Metric, base: tuple[float, ...], cand: tuple[float, ...], options: CheckOptions, common: dict[str, Any]) -> Check:
    """Peak memory: medians, worse beyond `memory_margin`. Compiles after warm-up: maxima, any increase."""
    if metric.name == "compiles":
        b, c = max(base), max(cand)
        verdict = Verdict.REGRESSION if c > b else Verdict.IMPROVEMENT if c < b else Verdict.PASS
        return Check(**common, verdict=verdict, ratio=c / b if b else None, baseline_value=b, candidate_value=c, message=f"{metric.label}: {b:g} -> {c:g} (most in any run)")
    b, c = float(np.median(base)), float(np.median(cand))
    ratio = c / b if b else None
    if ratio is None:
        return Check(**common, verdict=Verdict.BAD_DATA, baseline_value=b, candidate_value=c, message=f"{metric.label}: baseline is 0")
    verdict = Verdict.REGRESSION if ratio > 1 + options.memory_margin else Verdict.IMPROVEMENT if ratio < 1 - options.memory_margin else Verdict.PASS
    return Check(**common, verdict=verdict, ratio=ratio, baseline_value=b, candidate_value=c, message=f"{metric.label}: {_mib(b)} -> {_mib(c)} ({percent(ratio)}; any increase beyond {options.memory_margin:.0%} is a regression)")


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


def _aot_checks(name: str, baseline: Sequence[RunValues], candidate: Sequence[RunValues], options: CheckOptions) -> list[Check]:
    """Exact comparison per topology of the first run on each side (compile metrics are deterministic)."""
    base = {str(a.get("topology")): a for a in (baseline[0].aot if baseline else ())}
    cand = {str(a.get("topology")): a for a in (candidate[0].aot if candidate else ())}
    key, label, unit = {"aot_peak_hbm": ("peak_hbm_bytes", "TPU compile peak HBM", "bytes"), "aot_flops": ("flops_per_step", "TPU compile FLOPs/step", "FLOPs"),
                        "aot_step_estimate": ("optimal_step_s", "TPU compiler's estimated step time", "s")}[name]
    checks = []
    for topology in sorted(base.keys() & cand.keys()):
        b, c = base[topology].get(key), cand[topology].get(key)
        if name == "aot_step_estimate":
            b, c = (v if v is not None and v > 0 else None for v in (b, c))  # v5e's -0.99: no estimate
            if b is None and c is None:
                continue
        common = {"name": f"{name}[{topology}]", "unit": unit, "lower_is_better": True, "baseline": (b,), "candidate": (c,)}
        if b is None or c is None or not b:
            checks.append(Check(**common, verdict=Verdict.BAD_DATA, message=f"{label} on {topology}: unknown on a side (n/a)"))
        elif name == "aot_peak_hbm":
            metric = replace(METRIC_BY_NAME["peak_memory"], label=f"{label} on {topology}")
            checks.append(_deterministic_check(metric, (b,), (c,), options, common))
        else:
            checks.append(Check(**common, ratio=c / b, baseline_value=b, candidate_value=c, verdict=Verdict.PASS if c == b else Verdict.CHANGED, message=f"{label} on {topology}: {b:.4g} -> {c:.4g}" + (" (changed: the program does different work)" if c != b else " (same)")))
    if not checks and name == "aot_step_estimate":
        return []  # no topology's compiler gave an estimate: nothing to compare, nothing wrong
    if not checks:
        checks.append(Check(name=name, verdict=Verdict.BAD_DATA, message=f"{label}: no topology compiled on both sides ({', '.join(base) or 'none'} vs {', '.join(cand) or 'none'})"))
    return checks


def single_runs(baseline: Sequence[RunValues], candidate: Sequence[RunValues]) -> bool:
    """One run a side: timed metrics get an interval over steps (batch means), not over runs."""
    return len(baseline) == len(candidate) == 1


def default_metrics(baseline: Sequence[RunValues], candidate: Sequence[RunValues]) -> tuple[str, ...]:
    """MFU when every run has it (repeats), else step time (+ tokens/s when known); the all-in step
    time always (a candidate that recompiles cannot pass on its few fast steps); memory; compiles; aot."""
    runs = (*baseline, *candidate)

    def everywhere(metric: str) -> bool:
        return bool(runs) and all(METRIC_BY_NAME[metric].value(r) is not None for r in runs)

    serving = [m for m in SERVING_METRICS if everywhere(m) and (not single_runs(baseline, candidate) or METRIC_BY_NAME[m].samples)]
    if serving and not everywhere("step_time"):  # an inference run without steps: its requests are what is compared
        names = serving
    elif single_runs(baseline, candidate):
        names = ["step_time", *serving]
    else:
        names = ["mfu"] if everywhere("mfu") else ["step_time", *(["tokens_per_s"] if everywhere("tokens_per_s") else [])]
        names += serving
    names += [m for m in ("all_in_step_time", "peak_memory", "compiles") if everywhere(m)]
    names += [m for m in EXACT_METRICS if runs and all(getattr(r, LABELS[m][0]) is not None for r in runs)]
    if baseline and candidate and all(r.aot for r in runs):
        names += list(AOT_METRICS)
    return tuple(names)


def fingerprint_check(baseline: Sequence[RunValues], candidate: Sequence[RunValues], ignore: Sequence[str]) -> tuple[Check, tuple[str, ...]]:
    """NOT_COMPARABLE naming each field whose value differs between (or within) the sides."""
    differing, parts = [], []
    for key in FINGERPRINT_FIELDS:
        base = sorted({str(r.fingerprint.get(key) or "n/a") for r in baseline})
        cand = sorted({str(r.fingerprint.get(key) or "n/a") for r in candidate})
        if len({*base, *cand}) <= 1:
            continue
        differing.append(key)
        parts.append(f"{key}: {'/'.join(base)} -> {'/'.join(cand)}" + (" (ignored)" if key in ignore else ""))
    blocking = tuple(k for k in differing if k not in ignore)
    if blocking:
        return Check(name="fingerprint", verdict=Verdict.NOT_COMPARABLE, message="; ".join(parts)), tuple(differing)
    same = {k: v for k, v in (baseline or candidate)[0].fingerprint.items() if v is not None} if (baseline or candidate) else {}
    described = ", ".join(f"{k} {v}" for k, v in same.items() if k in ("chip", "chip_count", "framework", "jax", "torch"))
    message = "same " + (described or "fingerprint") + (f"; {'; '.join(parts)}" if parts else "")
    return Check(name="fingerprint", verdict=Verdict.PASS, message=message), tuple(differing)


def runs_check(baseline: Sequence[RunValues], candidate: Sequence[RunValues], options: CheckOptions, *, all_in: bool = False) -> Check:
    """BAD_DATA when a side has < 2 runs (unless both have one: intervals over steps), a run did not
    complete, or a run has too few steady steps and no all-in basis to fall back on (`all_in`)."""
    problems = []
    single = single_runs(baseline, candidate)
    for side, runs in (("baseline", baseline), ("candidate", candidate)):
        if len(runs) < 2 and not single:
            problems.append(f"{side} has {len(runs)} run(s); record at least 2 (5 recommended) with `tpu-perf record --repeat 5`")
        problems += [f"{side} run {r.run_id} {r.status}" + (f": {r.error}" if r.error else "") for r in runs if r.status != "completed"]
        if not all_in:  # a run that served requests and had no steps is judged by its requests
            problems += [f"{side} run {r.run_id} has {r.steady_steps} steady steps (< {options.min_steady_steps}); run more steps" for r in runs if r.status == "completed" and r.steady_steps < options.min_steady_steps and not (r.steady_steps == 0 and r.generated_tokens_per_s is not None)]
    if problems:
        return Check(name="runs", verdict=Verdict.BAD_DATA, message="; ".join(problems))
    how = "; one run a side: intervals over each run's steps (batch means), run-to-run noise not in them (`record --repeat` measures it)" if single else ""
    return Check(name="runs", verdict=Verdict.PASS, message=f"{len(baseline)} baseline and {len(candidate)} candidate runs completed{how}")


def all_in_basis(baseline: Sequence[RunValues], candidate: Sequence[RunValues]) -> str | None:
    """Why the speed verdict must stand on all-in step times, naming each run; None: steady is fine."""
    reasons = [f"{side} run {r.name} ({r.run_id}): {r.all_in_reason}" for side, runs in (("baseline", baseline), ("candidate", candidate)) for r in runs if r.all_in_reason]
    return "; ".join(reasons) or None


def overall(checks: Sequence[Check], *, inconclusive_ok: bool = False) -> tuple[Verdict, int]:
    """The verdict by precedence (NOT_COMPARABLE > REGRESSION > BAD_DATA > INCONCLUSIVE > ...) over
    the deciding checks, and its exit code; runs that cannot be judged at all are BAD_DATA first."""
    present = {c.verdict for c in checks if c.decides}
    unusable = any(c.name in ("runs", "pairs") and c.verdict == Verdict.BAD_DATA for c in checks)
    order = PRECEDENCE if not unusable else (Verdict.NOT_COMPARABLE, Verdict.BAD_DATA, *PRECEDENCE[1:])
    verdict = next((v for v in order if v in present), Verdict.PASS)
    code = EXIT_CODES[verdict]
    return verdict, 0 if (verdict == Verdict.INCONCLUSIVE and inconclusive_ok) else code


def check_sets(baseline: Sequence[RunValues], candidate: Sequence[RunValues], options: CheckOptions | None = None) -> CheckResult:
    """Compare two sets of runs on every chosen metric; the whole answer of `tpu-perf check`."""
    options = options or CheckOptions()
    fp, differing = fingerprint_check(baseline, candidate, options.ignore_fingerprint)
    names = options.metrics or default_metrics(baseline, candidate)
    reason = all_in_basis(baseline, candidate) if "all_in_step_time" in names else None
    timing_reason = None
    if options.timing == "cpu" and "step_time" in names:
        on_cpu, timing_reason = cpu_timing(baseline, candidate)
        if on_cpu and reason:
            timing_reason = "wall time decides: the all-in step time is the basis (see the basis), and the CPU time per step stands on the steady steps alone"
        if on_cpu and CPU_METRIC not in names:
            names = (*names[:names.index("step_time") + 1], CPU_METRIC, *names[names.index("step_time") + 1:])
    cpu_decides = CPU_METRIC in names and not reason
    checks = [fp, runs_check(baseline, candidate, options, all_in=reason is not None)]
    broken = tuple(side for side, runs in (("baseline", baseline), ("candidate", candidate)) if any(r.status != "completed" for r in runs))
    pairs = None
    if options.pair_by is not None:
        from tpu_perf.analyzers.paired import match_pairs, pairs_check

        pairs, notes = match_pairs(baseline, candidate, options.pair_by)
        checks.append(pairs_check(pairs, notes, options.pair_by))
    for name in names:
        if name in AOT_METRICS:
            checks += _aot_checks(name, baseline, candidate, options)
            continue
        if name in EXACT_METRICS:
            checks += exact_checks(baseline, candidate, (name,))
            continue
        metric = METRIC_BY_NAME[name]
        sources = {r.peak_memory_source for r in (*baseline, *candidate)} if name == "peak_memory" else set()
        if len(sources) > 1:  # device samples against XLA's estimate: different quantities
            checks.append(Check(name=name, verdict=Verdict.BAD_DATA, unit=metric.unit, message=f"peak memory comes from different sources ({', '.join(sorted(map(str, sources)))}); compare runs measured the same way"))
            continue
        steps = (metric.samples(baseline[0]), metric.samples(candidate[0])) if metric.samples and single_runs(baseline, candidate) else None
        if pairs is not None and metric.statistical:
            from tpu_perf.analyzers.paired import paired_check

            check = paired_check(metric, pairs, options)
        else:
            check = check_metric(metric, [metric.value(r) for r in baseline], [metric.value(r) for r in candidate], options, steps=steps)
        if broken and metric.statistical:  # a crashed run's few steps say nothing about speed
            check = replace(check, decides=False, message=f"{check.message} (not deciding: a run did not complete, see `runs`)")
        elif reason and metric.steady:  # the steady median hides what the all-in time shows: it does not decide
            check = replace(check, decides=False, message=f"{check.message} (not deciding: all-in step time decides, {reason})")
        elif cpu_decides and name == "step_time":  # on a CPU runner, the CPU time per step times the steady step
            check = replace(check, decides=False, message=f"{check.message} (not deciding: {timing_reason})")
        elif not reason and name == "all_in_step_time" and check.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
            check = replace(check, decides=False, message=f"{check.message} (not deciding: on the steady basis the all-in time is a guard that only a definite change turns into the verdict)")
        checks.append(check)
    basis = "all_in_step_time" if reason else CPU_METRIC if cpu_decides else "tpot_p50" if "step_time" not in names and "tpot_p50" in names else "step_time"  # a run of requests without steps: per output token
    if not options.require_timing:
        checks = program_tier(checks, basis=basis, statistical={n for n, m in METRIC_BY_NAME.items() if m.statistical},
                              unpaired=lambda c: check_metric(METRIC_BY_NAME[c.name], c.baseline, c.candidate, options))
    verdict, code = overall(checks, inconclusive_ok=options.inconclusive_ok)
    return CheckResult(
        verdict=verdict, exit_code=code, checks=tuple(checks), options=options,
        baseline_runs=tuple(r.run_id for r in baseline), candidate_runs=tuple(r.run_id for r in candidate),
        differing_fields=differing, basis=basis, basis_reason=reason, timing_reason=timing_reason,
        commits=(_commits(baseline), _commits(candidate)), broken=broken,
    )


def _commits(runs: Sequence[RunValues]) -> tuple[str, ...]:
    """The distinct git shas the runs recorded, dirty ones marked `+dirty`, in first-seen order."""
    shas = [f"{p['git_sha']}{'+dirty' if p.get('git_dirty') else ''}" for r in runs if (p := r.provenance).get("git_sha")]
    return tuple(dict.fromkeys(shas))
