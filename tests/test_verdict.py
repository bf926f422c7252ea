"""The compare page's verdict sentences, on values: the ratio and interval against SciPy's Welch
test on the same log step times, failed/crashed runs never compared, fingerprint fields named."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from tpu_perf.analyzers.verdict import Side, compare_steps, differing_fields, mismatch_text


def _side(label: str, times: np.ndarray, *, mfu: float | None = None, status: str = "completed") -> Side:
    return Side(label=label, status=status, steady_s=tuple(float(t) for t in times), median_s=float(np.median(times)) if len(times) else None, mfu=mfu)


@pytest.fixture
def runs() -> tuple[Side, Side]:
    rng = np.random.default_rng(7)
    a = 0.120 * np.exp(rng.normal(0, 0.04, 40))
    b = 0.120 / 1.38 * np.exp(rng.normal(0, 0.06, 25))
    return _side("A", a, mfu=0.41), _side("B", b, mfu=0.56)


def test_faster_with_welch_interval_matching_scipy(runs: tuple[Side, Side]) -> None:
    a, b = runs
    got = compare_steps(a, b)
    la, lb = np.log(a.steady_s), np.log(b.steady_s)
    test = stats.ttest_ind(la, lb, equal_var=False)
    ci = test.confidence_interval(confidence_level=0.95)
    assert got.kind == "faster"
    assert got.speedup == pytest.approx(math.exp(la.mean() - lb.mean()), rel=1e-12)
    assert got.low == pytest.approx(math.exp(ci.low), rel=1e-6) and got.high == pytest.approx(math.exp(ci.high), rel=1e-6)
    assert got.low < 1.38 < got.high  # the true speed-up the samples were drawn with
    assert got.text.startswith(f"B is {got.speedup:.2f}x faster per step than A (95 % interval {got.low:.2f}x–{got.high:.2f}x over 40 and 25 steady steps)")
    assert got.text.endswith("MFU 41.0 % → 56.0 %.")


def test_slower_is_the_mirror(runs: tuple[Side, Side]) -> None:
    a, b = runs
    fwd, back = compare_steps(a, b), compare_steps(b, a)
    assert back.kind == "slower" and back.speedup == pytest.approx(1 / fwd.speedup)
    assert f"A is {fwd.speedup:.2f}x slower per step than B (95 % interval {fwd.low:.2f}x–{fwd.high:.2f}x" in back.text


def test_same_within_noise() -> None:
    rng = np.random.default_rng(3)
    a, b = _side("A", 0.05 * np.exp(rng.normal(0, 0.05, 30))), _side("B", 0.05 * np.exp(rng.normal(0, 0.05, 30)))
    got = compare_steps(a, b)
    assert got.kind == "same" and got.low <= 1 <= got.high
    assert "same time per step within noise" in got.text and "MFU" not in got.text  # no MFU on either side: not mentioned


def test_failed_or_crashed_runs_get_no_ratio(runs: tuple[Side, Side]) -> None:
    a, b = runs
    for status, word in (("failed", "failed"), ("crashed", "crashed")):
        for base, cand in ((a, dataclasses.replace(b, status=status)), (dataclasses.replace(a, status=status), b)):
            got = compare_steps(base, cand)
            assert got.kind == "not_compared" and got.speedup is None
            assert f"B is not compared with A: {'B' if cand.status == status else 'A'} {word}" in got.text
            assert "faster" not in got.text and "%" not in got.text
    assert compare_steps(a, dataclasses.replace(b, status="interrupted")).kind == "faster"


def test_too_few_steps_and_no_steps(runs: tuple[Side, Side]) -> None:
    a, b = runs
    one = dataclasses.replace(b, steady_s=(0.08,), median_s=0.08)
    got = compare_steps(a, one)
    assert got.low is None and got.speedup == pytest.approx(a.median_s / 0.08)
    assert "from the medians; too few steady steps for an interval" in got.text
    none = dataclasses.replace(b, steady_s=(), median_s=None, mfu=None)
    got = compare_steps(a, none)
    assert got.kind == "unknown" and got.speedup is None
    assert got.text == "B vs A: no steady step time for B, so no speed comparison, MFU 41.0 % → n/a."


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


def test_unclear_when_the_interval_is_wide_and_includes_no_change() -> None:
    rng = np.random.default_rng(11)
    a = _side("A", 0.002 * np.exp(rng.normal(0, 0.8, 5)))
    b = _side("B", 0.002 * 1.5 * np.exp(rng.normal(0, 0.8, 5)))
    got = compare_steps(a, b)
    la, lb = np.log(a.steady_s), np.log(b.steady_s)
    ci = stats.ttest_ind(la, lb, equal_var=False).confidence_interval(confidence_level=0.95)
    assert math.exp(ci.low) <= 1 <= math.exp(ci.high) and math.exp(ci.high - ci.low) > 1.1  # SciPy agrees: wide, includes 1
    assert got.kind == "unclear" and got.text.startswith("No clear winner: B looks ")
    assert "includes no change; more steps would decide it" in got.text
