"""Noise stated in numbers: the smallest change the runs at hand could detect, and how many runs,
pairs or steps would decide an undecided check, from the measured spread (values in, no recording)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tpu_perf.analyzers.paired import paired_check
from tpu_perf.analyzers.regression import METRIC_BY_NAME, CheckOptions, Verdict, check_metric
from tpu_perf.analyzers.welch import POWER

STEP = METRIC_BY_NAME["step_time"]
OPTIONS = CheckOptions()


def spread(n: int, sigma: float, seed: int) -> np.ndarray:
    """n standard scores with sample mean 0 and sample sd exactly 1, times sigma: a measured spread."""
    z = np.random.default_rng(seed).standard_normal(n)
    return (z - z.mean()) / z.std(ddof=1) * sigma


def sides(n: int, sigma: float, change: float = 0.0, seed: int = 0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-run step times whose logs have sd `sigma` on each side, the candidate `change` slower."""
    return tuple(np.exp(spread(n, sigma, seed))), tuple(np.exp(spread(n, sigma, seed + 1) + math.log1p(change)))


@pytest.mark.parametrize(("sigma", "n"), [(0.02, 5), (0.03, 10)])
def test_the_smallest_detectable_slowdown_is_caught_at_the_stated_power(sigma: float, n: int) -> None:
    """At the slowdown a check states for its runs, fresh runs with the same noise are REGRESSION
    about 80 % of the time (1000 draws; the binomial sd is 1.3 %)."""
    check = check_metric(STEP, *sides(n, sigma), OPTIONS)
    assert check.verdict == Verdict.PASS and check.detectable is not None and check.detectable > OPTIONS.margin
    rng = np.random.default_rng(7)
    draws = 1000
    hits = sum(check_metric(STEP, tuple(np.exp(rng.normal(0, sigma, n))), tuple(np.exp(rng.normal(math.log1p(check.detectable), sigma, n))), OPTIONS).verdict == Verdict.REGRESSION for _ in range(draws))
    assert hits / draws == pytest.approx(POWER, abs=0.05)
    half = check.detectable * 0.6  # well below it, the same runs mostly miss
    misses = sum(check_metric(STEP, tuple(np.exp(rng.normal(0, sigma, n))), tuple(np.exp(rng.normal(math.log1p(half), sigma, n))), OPTIONS).verdict != Verdict.REGRESSION for _ in range(300))
    assert misses / 300 > 0.5


def test_noisy_bad_data_says_how_many_runs_would_decide_and_that_many_do() -> None:
    check = check_metric(STEP, *sides(5, 0.08), OPTIONS)
    assert check.verdict == Verdict.BAD_DATA and check.runs_needed is not None and check.runs_needed > 5
    assert f"about {check.runs_needed} runs a side would decide it" in check.message
    assert f"catch a slowdown of +{check.detectable * 100:.1f} % or more 80 % of the time" in check.message
    decided = check_metric(STEP, *sides(check.runs_needed, 0.08, seed=3), OPTIONS)  # the same spread, that many runs
    assert decided.verdict == Verdict.PASS and "does not stop the verdict" in decided.message
    fewer = check_metric(STEP, *sides(check.runs_needed - 1, 0.08, seed=3), OPTIONS)
    assert fewer.verdict == Verdict.BAD_DATA


def test_inconclusive_states_runs_needed_and_the_detectable_change() -> None:
    check = check_metric(STEP, *sides(5, 0.035, change=0.02), OPTIONS)
    assert check.verdict == Verdict.INCONCLUSIVE and check.runs_needed
    assert "runs a side would decide it" in check.message and "catch a slowdown of +" in check.message


def _pairs(ratios: np.ndarray) -> list[tuple[SimpleNamespace, SimpleNamespace]]:
    """Pairs whose machine factor swings 30 % between pairs and whose log ratios are `ratios`."""
    machine = np.resize([0.7, 1.3, 0.95, 1.05, 1.0], ratios.size)
    return [(SimpleNamespace(step_s=float(m)), SimpleNamespace(step_s=float(m * math.exp(r)))) for m, r in zip(machine, ratios, strict=True)]


def test_noisy_pairs_say_how_many_pairs_would_decide_and_that_many_do() -> None:
    noisy = paired_check(STEP, _pairs(spread(5, 0.07, 1)), OPTIONS)
    assert noisy.verdict == Verdict.BAD_DATA and noisy.runs_needed is not None
    assert f"about {noisy.runs_needed} pairs would decide it" in noisy.message and "catch a slowdown of +" in noisy.message
    assert "closer together" not in noisy.message  # back-to-back pairs cannot be recorded closer
    enough = paired_check(STEP, _pairs(spread(noisy.runs_needed, 0.07, 2)), OPTIONS)
    assert enough.verdict == Verdict.PASS


def test_one_run_a_side_inconclusive_says_how_many_steps() -> None:
    rng = np.random.default_rng(3)
    base, cand = np.exp(rng.normal(0, 0.08, 40)), np.exp(rng.normal(0.02, 0.08, 40))
    check = check_metric(STEP, (1.0,), (1.0,), OPTIONS, steps=(tuple(base), tuple(cand)))
    assert check.method == "batch means" and check.verdict == Verdict.INCONCLUSIVE
    assert check.steps_needed == 120 and "about 120 steps a run would decide it" in check.message
    assert "40 and 40 steps catch a slowdown of +4.8 % or more" in check.message
    longer = np.concatenate([base] * 3), np.concatenate([cand] * 3)  # the same steps, 120 a run: the spread and estimate as seen
    assert check_metric(STEP, (1.0,), (1.0,), OPTIONS, steps=longer).verdict == Verdict.PASS
