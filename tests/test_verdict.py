"""The verdict engine on values: the batch-means interval against a hand computation, the sentence
read off `check_sets` (so the compare page and `tpu-perf check` say the same), the all-in basis with
the steps it leaves out, autocorrelated steps not called "faster" on a 0.5 % difference, and the
precedence that cannot hide a definite result (3 runs a side at 9 % noise, twice as slow)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from tpu_perf.analyzers import batch_means
from tpu_perf.analyzers.all_in import Exclusion
from tpu_perf.analyzers.regression import (
    METRIC_BY_NAME,
    CheckOptions,
    Verdict,
    check_metric,
    check_sets,
)
from tpu_perf.analyzers.run_values import RunValues
from tpu_perf.analyzers.verdict import differing_fields, mismatch_text, speed_sentence

FP = {"chip": "tpu-v6e", "chip_count": "4", "framework": "jax", "jax": "0.10.2"}


def run(name: str, steps: np.ndarray, *, warmup: int = 1, status: str = "completed", excluded: tuple[Exclusion, ...] = ()) -> RunValues:
    """One run's values from its step iterations (the first `warmup` left out of the steady sample)."""
    steady = tuple(float(t) for t in steps[warmup:])
    after = tuple(float(t) for t in steps[1:])
    left = excluded or (Exclusion(reason="warmup", label="warm-up", steps=warmup, time_s=float(steps[:warmup].sum())),)
    share = float(sum(e.time_s for e in left if e.reason != "warmup") + steps[1:warmup].sum()) / float(np.sum(after))
    return RunValues(
        run_id=f"id-{name}", name=name, status=status, step_s=float(np.median(steady)) if steady else None, mfu=None, tokens_per_s=None,
        peak_memory_bytes=1 << 20, peak_memory_source="xla_memory_analysis", compiles_after_warmup=0, steady_steps=len(steady),
        fingerprint=FP, all_in_s=float(np.mean(after)), excluded=left, excluded_share=share, steady_samples_s=steady, all_in_samples_s=after,
    )


def said(a: RunValues, b: RunValues):  # noqa: ANN201
    result = check_sets([a], [b])
    return speed_sentence(a.name, b.name, [a], [b], result), result


def test_batch_means_interval_by_hand() -> None:
    rng = np.random.default_rng(7)
    a, b = 0.120 * np.exp(rng.normal(0, 0.04, 40)), 0.120 / 1.38 * np.exp(rng.normal(0, 0.06, 25))
    comp = batch_means.compare_runs(a, b, alpha=0.05, geometric=True)
    ba = np.log(a).reshape(20, 2).mean(axis=1)  # 40 steps: 20 batches of 2
    bb = np.array([np.log(b)[i:j].mean() for i, j in zip(np.linspace(0, 25, 13).astype(int)[:-1], np.linspace(0, 25, 13).astype(int)[1:], strict=True)])
    va, vb = ba.var(ddof=1) / 20, bb.var(ddof=1) / 12
    df = (va + vb) ** 2 / (va**2 / 19 + vb**2 / 11)
    d = np.log(b).mean() - np.log(a).mean()
    half = stats.t.ppf(0.95, df) * math.sqrt(va + vb)
    assert comp.ratio == pytest.approx(math.exp(d), rel=1e-12)
    assert (comp.low, comp.high) == (pytest.approx(math.exp(d - half), rel=1e-9), pytest.approx(math.exp(d + half), rel=1e-9))
    plain = batch_means.compare_runs(a, b, alpha=0.05, geometric=False)
    assert plain.ratio == pytest.approx(b.mean() / a.mean(), rel=1e-12)  # all-in: the ratio of the plain means
    assert batch_means.compare_runs(a[:3], b, alpha=0.05, geometric=True) is None  # 3 steps: not two batches


def test_faster_sentence_is_the_checks_verdict() -> None:
    rng = np.random.default_rng(7)
    a, b = run("A", 0.120 * np.exp(rng.normal(0, 0.04, 41))), run("B", 0.120 / 1.38 * np.exp(rng.normal(0, 0.06, 26)))
    got, result = said(a, b)
    check = next(c for c in result.checks if c.name == "step_time")
    assert result.basis == "step_time" and got.verdict == check.verdict == Verdict.IMPROVEMENT and got.kind == "faster"
    assert got.speedup == pytest.approx(1 / check.ratio) and got.low < got.speedup < got.high and 1.3 < got.speedup < 1.45
    assert got.text.startswith(f"B is {got.speedup:.2f}x faster per step than A (steady step time: 90 % interval {got.low:.2f}x–{got.high:.2f}x, batch means over 40 and 25 steps")
    back, _ = said(b, a)
    assert back.kind == "slower" and back.speedup == pytest.approx(1 / got.speedup)


def test_autocorrelated_steps_with_half_a_percent_are_not_called_faster() -> None:
    """AR(1) step times (rho 0.95, thousands of steps) 0.5 % apart: per-step Welch says "slower" with a
    tight interval; batch means widens it to the truth and the 3 % margin calls them the same."""
    rng = np.random.default_rng(5)

    def ar1(n: int) -> np.ndarray:
        e, x = rng.normal(0, 0.03, n), np.zeros(n)
        for i in range(1, n):
            x[i] = 0.95 * x[i - 1] + e[i]
        return np.exp(x)

    a, b = 0.1 * ar1(4000), 0.1 * 1.005 * ar1(4000)
    welch = stats.ttest_ind(np.log(a), np.log(b), equal_var=False).confidence_interval(0.90)
    comp = batch_means.compare_runs(a, b, alpha=0.05, geometric=True)
    assert welch.low > 0  # per-step Welch: "slower", with confidence
    assert math.log(comp.high / comp.low) > 3 * (welch.high - welch.low)  # ... on an interval far too narrow
    got, _ = said(run("A", a), run("B", b))
    assert got.kind == "same" and got.text.startswith("B and A take the same time per step within the 3% margin")


def test_recompiling_run_is_compared_all_in_and_says_what_it_leaves_out() -> None:
    """The issue's case: the bad run's first 10 steps compile (900 ms), then 4 fast 20 ms steps; the
    fix takes 100 ms a step. The steady median says bad is 5x faster; all-in, the fix is ~6.6x faster."""
    bad_steps = np.array([1.2] + [0.9] * 9 + [0.02] * 4)
    good_steps = np.array([1.0] + [0.1] * 13) * np.exp(np.random.default_rng(1).normal(0, 0.02, 14))
    left = (Exclusion(reason="compiled", label="compiled a new program", steps=9, time_s=8.1), Exclusion(reason="warmup", label="warm-up", steps=1, time_s=1.2))
    bad, good = run("bad", bad_steps, warmup=10, excluded=left), run("good", good_steps)
    got, result = said(bad, good)
    assert result.basis == "all_in_step_time" and "only 4 steady steps (< 5)" in result.basis_reason
    assert got.kind == "faster" and got.speedup == pytest.approx(bad_steps[1:].mean() / good_steps[1:].mean())
    assert got.text.startswith(f"good is {got.speedup:.2f}x faster per step than bad (all-in wall time per step (every step after the first): 90 % interval")
    assert "bad's steady median leaves out 10 of 14 steps: 9 compiled a new program (8.100 s), 1 warm-up (1.200 s)" in got.text
    steady = next(c for c in result.checks if c.name == "step_time")
    assert not steady.decides and "not deciding: all-in step time decides" in steady.message
    assert result.verdict == Verdict.IMPROVEMENT and result.exit_code == 0
    worse, back = said(good, bad)  # the recompiling candidate cannot pass on its few fast steps
    assert back.verdict == Verdict.REGRESSION and back.exit_code == 1 and worse.kind == "slower"


def test_twice_as_slow_at_nine_percent_noise_is_a_regression_whatever_the_cv() -> None:
    """3 runs a side, ~9 % run-to-run noise, the candidate twice as slow: REGRESSION, exit 1 (it was
    BAD_DATA, exit 4, for CV > --max-cv), and the +98 % peak memory regression is not outranked."""
    base, cand = [1.00, 1.09, 0.92], [2.00 * 1.08, 2.00 * 0.91, 2.00]
    check = check_metric(METRIC_BY_NAME["step_time"], base, cand, CheckOptions())
    assert check.candidate_cv > 0.05 and check.low > 1.03
    assert check.verdict == Verdict.REGRESSION and "does not stop the verdict" in check.message
    runs = [dataclasses.replace(run(f"b{i}", np.full(20, v)), run_id=f"b{i}") for i, v in enumerate(base)]
    cands = [dataclasses.replace(run(f"c{i}", np.full(20, v)), run_id=f"c{i}", peak_memory_bytes=int(1.98 * (1 << 20))) for i, v in enumerate(cand)]
    result = check_sets(runs, cands)
    assert result.verdict == Verdict.REGRESSION and result.exit_code == 1
    assert next(c for c in result.checks if c.name == "peak_memory").verdict == Verdict.REGRESSION
    same = check_metric(METRIC_BY_NAME["step_time"], base, [1.05, 0.95, 0.99], CheckOptions())
    assert same.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT)  # noisy and unchanged: no claim


def test_failed_or_crashed_runs_get_no_ratio() -> None:
    steps = np.full(20, 0.1)
    a, b = run("A", steps), run("B", steps * 0.5)
    for status, word in (("failed", "failed"), ("crashed", "crashed")):
        for base, cand in ((a, dataclasses.replace(b, status=status)), (dataclasses.replace(a, status=status), b)):
            got = speed_sentence("A", "B", [base], [cand], check_sets([base], [cand]))
            assert got.kind == "not_compared" and got.speedup is None
            assert f"B is not compared with A: {'B' if cand.status == status else 'A'} {word}" in got.text


def test_fingerprint_differences_are_named() -> None:
    fps = {
        "A": {"chip": "TPU v5 lite", "chip_count": "8", "jax": "0.6.0", "model": "llama-8b"},
        "B": {"chip": "TPU v6 lite", "chip_count": "8", "jax": "0.6.0", "model": None},
    }
    diffs = differing_fields(fps)
    assert diffs == {"chip": {"A": "TPU v5 lite", "B": "TPU v6 lite"}, "model": {"A": "llama-8b", "B": "n/a"}}
    assert mismatch_text(diffs) == "Not a like-for-like comparison: the runs differ in chip (A: TPU v5 lite, B: TPU v6 lite); model (A: llama-8b, B: n/a)."
    assert mismatch_text(differing_fields({"A": fps["A"], "B": dict(fps["A"])})) is None
    long = mismatch_text(differing_fields({"A": {"xla_flags": "--x" * 40}, "B": {"xla_flags": None}}))
    assert "…" in long and len(long) < 120


def _checked(a: RunValues, b: RunValues):  # noqa: ANN202
    from tpu_perf.dashboard.export import Checked

    sentence, result = said(a, b)
    return Checked(baseline=a.name, candidate=b.name, result=result, groups=False, sentence=sentence)


def _rows(kpis: list[str], run: str):  # noqa: ANN202
    import pandas as pd

    return pd.DataFrame({"kpi": kpis, "run": [run] * len(kpis)})


def test_colour_only_what_the_verdict_can_claim() -> None:
    from tpu_perf.dashboard.export import claims
    from tpu_perf.dashboard.kpi_table import _cell

    rng = np.random.default_rng(2)
    kpis = ["Step time", "All-in step time", "Peak HBM", "p90 step time", "Compile time"]
    a, b = run("A", 0.1 * np.exp(rng.normal(0, 0.02, 60))), run("B", 0.05 * np.exp(rng.normal(0, 0.02, 60)))
    b = dataclasses.replace(b, peak_memory_bytes=a.peak_memory_bytes)  # the same memory: PASS, no claim
    assert claims(_rows(kpis, "B"), [_checked(a, b)]) == [True, True, False, False, False]  # no interval, no colour
    noisy = run("C", 0.1 * 1.066 * np.exp(rng.normal(0, 0.6, 10)))  # looks +6.6 %, interval includes no change
    c = _checked(a, noisy)
    assert c.sentence.kind == "unclear" and c.sentence.text.startswith("No clear winner")
    assert claims(_rows(kpis, "C"), [c]) == [False] * len(kpis)  # "No clear winner" colours nothing
    cell = {"why": None, "shown": "107 ms", "delta": 0.066, "lower_is_better": True, "neutral": False}
    assert "tp-worse" in _cell({**cell, "claim": True}) and "tp-same" in _cell({**cell, "claim": False})
