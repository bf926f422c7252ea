"""`check --pair-by tag:pair` on real recordings whose machine speed changes between pairs.

Five pairs recorded back to back (gate_loop.py, a wait per step): pair i runs on a machine factor
f_i within +-30 % (per-side CV about 20 %), which every run of the pair shares, as runs seconds
apart on a shared CI machine do. Per pair: the baseline (work 100 f_i), an unchanged candidate
(the same) and a 10 % slower one (work 110 f_i). Unpaired, the sides are BAD_DATA (too noisy);
paired, the unchanged candidate PASSes (exit 0) and the slower one is REGRESSION (exit 1).
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, tpu_perf_cli, tpu_perf_clis

SCRIPT = str(ROOT / "tests" / "scripts" / "gate_loop.py")
FACTORS = (0.7, 1.3, 0.95, 1.05, 1.0)
"""The machine's speed per pair: +-30 % at the extremes."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Pair after pair; in each, the baseline and the unchanged candidate at once (on 2 cores their
    waits hold; side by side they share the moment exactly), then the slower candidate."""
    path = str(tmp_path_factory.mktemp("paired") / "runs")

    def args(i: int, side: str, work: float) -> list[str]:
        return ["record", "--store", path, "--tag", f"side={side}", "--tag", f"pair={i}", "--name", "paired", "--no-trace", "-q", SCRIPT, "--work", str(work), "--steps", "30"]

    for i, factor in enumerate(FACTORS):
        for proc in tpu_perf_clis(args(i, "base", 100 * factor), args(i, "same", 100 * factor)):
            assert proc.returncode == 0, proc.stderr
        tpu_perf_cli(*args(i, "slow", 110 * factor), check=True)
    return path


def check(store: str, candidate: str, *extra: str) -> tuple[int, dict]:
    proc = tpu_perf_cli("check", "--store", store, "--baseline", "tag:side=base", "--candidate", f"tag:side={candidate}", "--json", *extra)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_metric(doc: dict) -> dict[str, dict]:
    return {c["metric"]: c for c in doc["checks"]}


def test_unpaired_the_machine_factor_is_bad_data(store: str) -> None:
    code, doc = check(store, "same")
    step = by_metric(doc)["step_time"]
    assert step["baseline_cv"] > 0.15 and step["candidate_cv"] > 0.15
    assert (code, doc["verdict"]) == (4, "BAD_DATA"), step["message"]


def test_paired_unchanged_candidate_passes(store: str) -> None:
    code, doc = check(store, "same", "--pair-by", "tag:pair")
    checks = by_metric(doc)
    step = checks["step_time"]
    assert checks["pairs"]["verdict"] == "PASS" and "5 pairs" in checks["pairs"]["message"]
    assert step["method"] == "paired log ratios" and step["sample_sizes"] == [5, 5]
    assert step["baseline_cv"] > 0.15, "the sides must carry the machine factor"
    assert (code, doc["verdict"]) == (0, "PASS"), step["message"]
    assert 0.97 < step["ratio"] < 1.03


def test_paired_ten_percent_slower_is_regression(store: str) -> None:
    code, doc = check(store, "slow", "--pair-by", "tag:pair")
    step = by_metric(doc)["step_time"]
    assert (code, doc["verdict"]) == (1, "REGRESSION"), step["message"]
    assert 1.06 < step["ratio"] < 1.14 and step["interval"][0] > 1.0


def test_pair_by_needs_tag_key_and_two_pairs(store: str) -> None:
    bad = tpu_perf_cli("check", "--store", store, "--baseline", "tag:side=base", "--candidate", "tag:side=same", "--pair-by", "pair")
    assert bad.returncode == 2 and "tag:KEY" in bad.stderr
    code, doc = check(store, "same", "--pair-by", "tag:side")  # side values never match across sides
    assert (code, doc["verdict"]) == (4, "BAD_DATA")
    assert "0 pair(s) by tag side" in by_metric(doc)["pairs"]["message"]


def test_timing_cpu_keeps_wall_time_for_a_step_that_waits(store: str) -> None:
    """These steps sleep: each step's CPU time is recorded (`tpu_perf.step()` boundaries stamp it)
    but is a small share of the step, so `--timing cpu` keeps wall time, says why, and still
    catches the 10 % slower candidate (CPU time would not see a longer wait)."""
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.commands.selectors import select

    run = select(["tag:side=slow"], store, flag="--store").runs[0]
    steps = build_report(run).steps
    assert steps.cpu_median_s is not None and 0 < steps.cpu_median_s < 0.25 * steps.steady_step_s
    code, doc = check(store, "slow", "--pair-by", "tag:pair", "--timing", "cpu")
    assert doc["basis"] == "step_time" and "the step waits or sleeps" in doc["timing_reason"], doc["timing_reason"]
    assert "cpu_step_time" not in by_metric(doc) and (code, doc["verdict"]) == (1, "REGRESSION")
    bad = tpu_perf_cli("check", "--store", store, "--baseline", "tag:side=base", "--candidate", "tag:side=slow", "--timing", "sundial")
    assert bad.returncode == 2 and "--timing sundial: one of wall, cpu" in bad.stderr, bad.stderr
