"""The check's statistics and rules on values: thresholds just above and below, hand-computed numbers."""

from __future__ import annotations

import math
from dataclasses import replace
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from scipy import stats

from tpu_perf.analyzers.regression import (
    METRIC_BY_NAME,
    Check,
    CheckOptions,
    Verdict,
    check_metric,
    check_sets,
    compare_samples,
    default_metrics,
    overall,
    runs_needed,
)
from tpu_perf.analyzers.run_values import RunValues
from tpu_perf.analyzers.welch import t_quantile
from tpu_perf.jsonio import dumps
from tpu_perf.views.check import github_annotations, render_junit, render_markdown

STEP = METRIC_BY_NAME["step_time"]
MFU = METRIC_BY_NAME["mfu"]
LIMIT = math.log(1.03)
T_95_DF4 = 2.132  # Student t table, one-sided 0.95, 4 degrees of freedom


@pytest.mark.parametrize(("p", "df", "table"), [(0.95, 1, 6.314), (0.95, 4, 2.132), (0.95, 8, 1.860), (0.975, 10, 2.228), (0.99, 30, 2.457), (0.995, 2, 9.925), (0.95, 1e7, 1.645)])
def test_t_quantile_matches_printed_tables(p: float, df: float, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=6e-4)


def test_interval_ends_are_one_sided_welch_bounds() -> None:
    base = [1.00, 1.03, 0.98, 1.01, 0.99]
    cand = [1.08, 1.02, 1.11, 1.05, 1.07, 1.04]
    comp = compare_samples(base, cand, alpha=0.05)
    x, y = np.log(base), np.log(cand)
    assert comp.ratio == pytest.approx(stats.gmean(cand) / stats.gmean(base))
    # At the lower end, Welch's one-sided test of "log ratio > log(low)" has p = alpha exactly.
    assert stats.ttest_ind(y - math.log(comp.low), x, equal_var=False, alternative="greater").pvalue == pytest.approx(0.05, abs=1e-9)
    assert stats.ttest_ind(y - math.log(comp.high), x, equal_var=False, alternative="less").pvalue == pytest.approx(0.05, abs=1e-9)


def sides(shift: float, spread: float, center: float = 0.0) -> tuple[list[float], list[float]]:
    """3 runs a side with log values c-s, c, c+s and the candidate shifted by `shift` (log units).

    Sample variance s^2 each, so half-width = t(0.95, df=4) * s * sqrt(2/3) by hand."""
    logs = np.array([-spread, 0.0, spread]) + center
    return np.exp(logs).tolist(), np.exp(logs + shift).tolist()


def half(spread: float) -> float:
    return T_95_DF4 * spread * math.sqrt(2 / 3)


def verdict(shift: float, spread: float, metric=STEP, **options) -> Verdict:
    base, cand = sides(shift, spread)
    return check_metric(metric, base, cand, CheckOptions(max_cv=0.5, **options)).verdict


def test_regression_needs_the_estimate_beyond_the_margin() -> None:
    spread = 0.004  # half-width ~0.7 %, well inside the margin
    assert verdict(LIMIT + 1e-4, spread) == Verdict.REGRESSION
    assert verdict(LIMIT - 1e-4, spread) == Verdict.INCONCLUSIVE  # the high end is above the margin


def test_regression_needs_confidence_that_it_is_worse() -> None:
    spread = 0.03  # half-width ~5.2 %, wider than the margin
    assert verdict(half(spread) + 2e-4, spread) == Verdict.REGRESSION
    assert verdict(half(spread) - 2e-4, spread) == Verdict.INCONCLUSIVE


def test_pass_needs_the_high_end_within_the_margin() -> None:
    spread = 0.01
    assert verdict(LIMIT - half(spread) - 2e-4, spread) == Verdict.PASS
    assert verdict(LIMIT - half(spread) + 2e-4, spread) == Verdict.INCONCLUSIVE


def test_improvement_and_higher_is_better_are_mirror_images() -> None:
    spread = 0.004
    assert verdict(-(LIMIT + 1e-4), spread) == Verdict.IMPROVEMENT
    assert verdict(-(LIMIT - 1e-4), spread) == Verdict.PASS
    assert verdict(-(LIMIT + 1e-4), spread, metric=MFU) == Verdict.REGRESSION  # MFU down 3 %+: worse
    assert verdict(LIMIT + 1e-4, spread, metric=MFU) == Verdict.IMPROVEMENT


def test_margin_option_moves_the_threshold() -> None:
    spread = 0.004
    assert verdict(math.log(1.06), spread) == Verdict.REGRESSION
    assert verdict(math.log(1.06), spread, margin=0.10) == Verdict.PASS


def test_cv_just_above_the_limit_is_bad_data() -> None:
    for c, expected_bad in ((0.0499, False), (0.0501, True)):
        base = [1 - c, 1.0, 1 + c]  # sample sd c, mean 1: CV c
        check = check_metric(STEP, base, [1.0, 1.0, 1.0], CheckOptions())
        assert check.baseline_cv == pytest.approx(c)
        assert (check.verdict == Verdict.BAD_DATA) is expected_bad


def test_one_run_a_side_or_a_missing_value_is_bad_data() -> None:
    assert check_metric(STEP, [1.0], [1.0, 1.1], CheckOptions()).verdict == Verdict.BAD_DATA
    missing = check_metric(STEP, [1.0, 1.01], [1.0, None], CheckOptions())
    assert missing.verdict == Verdict.BAD_DATA and "candidate" in missing.message


def test_runs_needed_is_the_smallest_n_that_decides() -> None:
    base, cand = sides(0.01, 0.02)  # +1 %: PASS once the high end falls under 3 %
    check = check_metric(STEP, base, cand, CheckOptions())
    assert check.verdict == Verdict.INCONCLUSIVE and check.runs_needed is not None
    s, gap = 0.02, LIMIT - 0.01  # pooled log sd and distance to the margin, by hand

    def width(n: int) -> float:
        return stats.t.ppf(0.95, 2 * n - 2) * s * math.sqrt(2 / n)

    n = check.runs_needed
    assert width(n) < gap <= width(n - 1)
    assert f"about {n} runs" in check.message
    # And with that many runs at the same estimate and noise the verdict is PASS.
    logs = np.linspace(-1, 1, n)
    logs = logs / logs.std(ddof=1) * s
    assert check_metric(STEP, np.exp(logs).tolist(), np.exp(logs + 0.01).tolist(), CheckOptions()).verdict == Verdict.PASS
    comp = compare_samples(base, cand, alpha=0.05)
    assert runs_needed(comp, lower_is_better=True, margin=0.03, alpha=0.05) == n


def test_overall_precedence_and_exit_codes() -> None:
    def checks(*verdicts: Verdict) -> list[Check]:
        return [Check(name=f"c{i}", verdict=v, message="") for i, v in enumerate(verdicts)]

    V = Verdict
    assert overall(checks(V.PASS, V.IMPROVEMENT, V.CHANGED)) == (V.IMPROVEMENT, 0)
    assert overall(checks(V.PASS, V.INCONCLUSIVE)) == (V.INCONCLUSIVE, 3)
    assert overall(checks(V.PASS, V.INCONCLUSIVE), inconclusive_ok=True) == (V.INCONCLUSIVE, 0)
    assert overall(checks(V.INCONCLUSIVE, V.REGRESSION)) == (V.REGRESSION, 1)
    assert overall(checks(V.REGRESSION, V.BAD_DATA)) == (V.REGRESSION, 1)  # a definite regression is not hidden by another metric's noise
    unusable = [Check(name="runs", verdict=V.BAD_DATA, message="candidate run r1 failed"), *checks(V.REGRESSION)]
    assert overall(unusable) == (V.BAD_DATA, 4)  # a failed run cannot be judged at all
    assert overall([*checks(V.PASS), Check(name="step_time", verdict=V.REGRESSION, message="", decides=False)]) == (V.PASS, 0)
    assert overall(checks(V.BAD_DATA, V.NOT_COMPARABLE, V.REGRESSION)) == (V.NOT_COMPARABLE, 5)


def run(i: int, step_s: float | None, **changes) -> RunValues:
    values = RunValues(
        run_id=f"r{i}", name="train", status="completed", step_s=step_s, mfu=None, tokens_per_s=None,
        peak_memory_bytes=1_000_000, peak_memory_source="xla_memory_analysis", compiles_after_warmup=0, steady_steps=50,
        fingerprint={"chip": "tpu-v6e", "chip_count": "4", "framework": "jax", "jax": "0.10.2"},
    )
    return replace(values, **changes)


BASE = [run(i, t) for i, t in enumerate([1.00, 1.01, 0.99, 1.005, 0.995])]


def test_identical_sets_pass_and_a_slower_set_regresses() -> None:
    same = check_sets(BASE, [run(10 + i, r.step_s) for i, r in enumerate(BASE)])
    assert (same.verdict, same.exit_code) == (Verdict.PASS, 0)
    slow = check_sets(BASE, [run(10 + i, r.step_s * 1.10) for i, r in enumerate(BASE)])
    assert (slow.verdict, slow.exit_code) == (Verdict.REGRESSION, 1)
    step = next(c for c in slow.checks if c.name == "step_time")
    assert step.ratio == pytest.approx(1.10)
    assert step.baseline == tuple(r.step_s for r in BASE)


def test_another_chip_is_not_comparable_and_names_the_field() -> None:
    other = [replace(r, run_id=f"c{i}", fingerprint={**r.fingerprint, "chip": "tpu-v5p"}) for i, r in enumerate(BASE)]
    result = check_sets(BASE, other)
    assert (result.verdict, result.exit_code) == (Verdict.NOT_COMPARABLE, 5)
    assert result.differing_fields == ("chip",)
    assert "chip: tpu-v6e -> tpu-v5p" in result.checks[0].message
    accepted = check_sets(BASE, other, CheckOptions(ignore_fingerprint=("chip",)))
    assert accepted.verdict == Verdict.PASS and "(ignored)" in accepted.checks[0].message


def test_mixed_versions_within_one_side_are_named() -> None:
    mixed = [replace(r, run_id=f"c{i}", fingerprint={**r.fingerprint, "jax": "0.11.0" if i else "0.10.2"}) for i, r in enumerate(BASE)]
    result = check_sets(BASE, mixed)
    assert result.verdict == Verdict.NOT_COMPARABLE and "jax: 0.10.2 -> 0.10.2/0.11.0" in result.checks[0].message


def test_failed_run_and_short_runs_are_bad_data() -> None:
    failed = [*BASE[:4], replace(BASE[4], status="failed")]
    result = check_sets(BASE, [replace(r, run_id=f"c{i}") for i, r in enumerate(failed)])
    assert (result.verdict, result.exit_code) == (Verdict.BAD_DATA, 4)
    assert "candidate run c4 failed" in result.checks[1].message
    short = check_sets(BASE, [replace(r, run_id=f"c{i}", steady_steps=4) for i, r in enumerate(BASE)])
    assert short.verdict == Verdict.BAD_DATA and "4 steady steps (< 5)" in short.checks[1].message
    single = check_sets(BASE, [BASE[0]])
    assert single.verdict == Verdict.BAD_DATA


def test_peak_memory_increase_beyond_one_percent_is_a_regression() -> None:
    for factor, expected in ((1.0099, Verdict.PASS), (1.0101, Verdict.REGRESSION), (0.98, Verdict.IMPROVEMENT)):
        cand = [replace(r, run_id=f"c{i}", peak_memory_bytes=int(1_000_000 * factor)) for i, r in enumerate(BASE)]
        memory = next(c for c in check_sets(BASE, cand).checks if c.name == "peak_memory")
        assert memory.verdict == expected, factor
    sampled = [replace(r, run_id=f"c{i}", peak_memory_source="jax") for i, r in enumerate(BASE)]
    memory = next(c for c in check_sets(BASE, sampled).checks if c.name == "peak_memory")
    assert memory.verdict == Verdict.BAD_DATA and "different sources" in memory.message


def test_any_extra_compile_after_warmup_is_a_regression() -> None:
    cand = [replace(r, run_id=f"c{i}", compiles_after_warmup=1 if i == 2 else 0) for i, r in enumerate(BASE)]
    result = check_sets(BASE, cand)
    assert result.verdict == Verdict.REGRESSION
    assert next(c for c in result.checks if c.name == "compiles").message == "compiles after warm-up: 0 -> 1 (most in any run)"


def test_default_metrics_prefer_mfu_when_every_run_has_it() -> None:
    assert default_metrics(BASE, BASE) == ("step_time", "peak_memory", "compiles")
    with_mfu = [replace(r, mfu=0.4, tokens_per_s=1e5) for r in BASE]
    assert default_metrics(with_mfu, with_mfu) == ("mfu", "peak_memory", "compiles")
    with_tokens = [replace(r, tokens_per_s=1e5) for r in BASE]
    assert default_metrics(with_tokens, BASE) == ("step_time", "peak_memory", "compiles")
    assert default_metrics(with_tokens, with_tokens)[:2] == ("step_time", "tokens_per_s")


def aot(topology: str, flops: float, hbm: int) -> dict:
    return {"topology": topology, "chip": "tpu-v6e", "chips": 4, "flops_per_step": flops, "peak_hbm_bytes": hbm, "optimal_step_s": 0.01}


def test_aot_flops_change_is_changed_not_a_failure_and_hbm_is_exact() -> None:
    base = [replace(r, aot=(aot("v6e:2x2", 1e12, 8 << 30), aot("v5p:2x2x1", 1e12, 9 << 30))) for r in BASE]
    cand = [replace(r, run_id=f"c{i}", aot=(aot("v6e:2x2", 1.2e12, 8 << 30), aot("v5p:2x2x1", 1e12, 9 << 30))) for i, r in enumerate(BASE)]
    result = check_sets(base, cand)
    by_name = {c.name: c for c in result.checks}
    assert by_name["aot_flops[v6e:2x2]"].verdict == Verdict.CHANGED
    assert by_name["aot_flops[v5p:2x2x1]"].verdict == Verdict.PASS
    assert by_name["aot_peak_hbm[v6e:2x2]"].verdict == Verdict.PASS
    assert (result.verdict, result.exit_code) == (Verdict.CHANGED, 0)
    bigger = [replace(r, aot=(aot("v6e:2x2", 1e12, int((8 << 30) * 1.02)),)) for r in cand]
    result = check_sets(base, bigger)
    assert {c.name: c.verdict for c in result.checks}["aot_peak_hbm[v6e:2x2]"] == Verdict.REGRESSION
    # A run without the section: the aot metrics are simply not chosen.
    assert "aot_flops" not in default_metrics(base, BASE)


def test_the_tpu_compilers_step_estimate_is_compared_where_it_gives_one() -> None:
    def entry(topology: str, estimate: float) -> dict:
        return {**aot(topology, 1e12, 8 << 30), "optimal_step_s": estimate}

    base = [replace(r, aot=(entry("v6e:2x2", 0.010), entry("v5e:2x2", -0.99))) for r in BASE]
    cand = [replace(r, run_id=f"c{i}", aot=(entry("v6e:2x2", 0.012), entry("v5e:2x2", -0.99))) for i, r in enumerate(BASE)]
    by_name = {c.name: c for c in check_sets(base, cand).checks}
    estimate = by_name["aot_step_estimate[v6e:2x2]"]
    assert estimate.verdict == Verdict.CHANGED and estimate.ratio == pytest.approx(1.2)
    assert "aot_step_estimate[v5e:2x2]" not in by_name  # v5e's compiler gives no estimate (-0.99): nothing to compare
    same = {c.name: c.verdict for c in check_sets(base, [replace(r, run_id=f"c{i}") for i, r in enumerate(base)]).checks}
    assert same["aot_step_estimate[v6e:2x2]"] == Verdict.PASS


def test_saved_values_round_trip_through_json() -> None:
    import json

    original = replace(BASE[0], aot=(aot("v6e:2x2", 1e12, 1 << 30),), mfu=None)
    assert RunValues.from_dict(json.loads(dumps(original.to_dict()))) == original


def candidates_for_every_verdict() -> dict[tuple[Verdict, bool], tuple[list[RunValues], list[RunValues], CheckOptions]]:
    """(verdict, --inconclusive-ok) -> baseline, candidate and options that check_sets judges so."""
    def cand(**changes) -> list[RunValues]:
        return [replace(r, run_id=f"c{i}", **{k: v(r, i) if callable(v) else v for k, v in changes.items()}) for i, r in enumerate(BASE)]

    with_aot = [replace(r, aot=(aot("v6e:2x2", 1e12, 8 << 30),)) for r in BASE]
    noisy = cand(step_s=lambda r, i: 1.02 * (1.0 + 0.02 * (i - 2)))
    program = {"hlo_hash": "0123456789abcdef", "flops_per_step": 1e12, "bytes_accessed": 4e9}  # the same compiled program
    return {
        (Verdict.UNCHANGED, False): ([replace(r, **program) for r in BASE], [replace(r, **program) for r in noisy], CheckOptions()),
        (Verdict.PASS, False): (BASE, cand(), CheckOptions()),
        (Verdict.IMPROVEMENT, False): (BASE, cand(step_s=lambda r, i: r.step_s * 0.9), CheckOptions()),
        (Verdict.CHANGED, False): (with_aot, [replace(r, run_id=f"c{i}", aot=(aot("v6e:2x2", 1.2e12, 8 << 30),)) for i, r in enumerate(with_aot)], CheckOptions()),
        (Verdict.INCONCLUSIVE, False): (BASE, noisy, CheckOptions()),
        (Verdict.INCONCLUSIVE, True): (BASE, noisy, CheckOptions(inconclusive_ok=True)),
        (Verdict.REGRESSION, False): (BASE, cand(step_s=lambda r, i: r.step_s * 1.1), CheckOptions()),
        (Verdict.BAD_DATA, False): (BASE, cand(status=lambda r, i: "failed" if i == 4 else "completed"), CheckOptions()),
        (Verdict.NOT_COMPARABLE, False): (BASE, cand(fingerprint=lambda r, i: {**r.fingerprint, "chip": "tpu-v5p"}), CheckOptions()),
    }


@pytest.mark.parametrize(("verdict", "ok"), list(candidates_for_every_verdict()))
def test_exit_code_junit_and_annotations_agree_for_every_verdict(verdict: Verdict, ok: bool) -> None:
    """Exit code not 0 <=> JUnit failures > 0 <=> an ::error annotation, for each verdict; an
    INCONCLUSIVE that exits 3 is a failure in all three, one allowed by --inconclusive-ok a skip."""
    base, cand, options = candidates_for_every_verdict()[(verdict, ok)]
    result = check_sets(base, cand, options)
    assert result.verdict == verdict
    suite = ET.fromstring(render_junit(result)).find("testsuite")
    assert suite is not None
    failures, skipped = int(suite.get("failures")), int(suite.get("skipped"))
    levels = [line.split(" ", 1)[0] for line in github_annotations(result)]
    fails = result.exit_code != 0
    assert (failures > 0, "::error" in levels) == (fails, fails), (result.exit_code, failures, levels)
    assert f"**{verdict.value}** (exit {result.exit_code})" in render_markdown(result)
    assert [c.get("name") for c in suite.iter("testcase")] == [c.name for c in result.checks]
    if fails:
        assert {f.get("type") for f in suite.iter("failure")} >= {verdict.value}
    if verdict == Verdict.INCONCLUSIVE:
        assert (result.exit_code, failures, skipped) == ((0, 0, 1) if ok else (3, 1, 0))
        assert levels == (["::warning"] if ok else ["::error"])
    if verdict == Verdict.REGRESSION:
        assert github_annotations(result)[0].startswith("::error title=tpu-perf check step_time::REGRESSION: step time +10.0 %25")
        doc = result.to_dict()
        assert doc["schema_version"] == 2 and doc["verdict"] == "REGRESSION" and doc["exit_code"] == 1
        step = next(c for c in doc["checks"] if c["metric"] == "step_time")
        assert step["interval"][0] > 1.0 and step["runs_needed"] is None


def test_options_reject_bad_values() -> None:
    for bad in ({"alpha": 0.7}, {"margin": -0.1}, {"metrics": ("speed",)}, {"ignore_fingerprint": ("colour",)}):
        with pytest.raises(ValueError):
            CheckOptions(**bad)


def test_aot_section_may_be_one_dict_a_list_or_absent() -> None:
    entry = {**aot("v6e:2x2", 1e12, 1 << 30), "fusions": {"kLoop": 3}, "hlo_file": "aot/v6e.hlo"}
    saved = BASE[0].to_dict()
    assert RunValues.from_dict({**saved, "aot": entry}).aot == (aot("v6e:2x2", 1e12, 1 << 30),)
    assert len(RunValues.from_dict({**saved, "aot": [entry, entry]}).aot) == 2
    assert RunValues.from_dict({**saved, "aot": None}).aot == ()


def test_summary_tells_the_author_whose_failure_it_is_and_names_both_commits() -> None:
    def with_sha(runs: list[RunValues], sha: str, **changes) -> list[RunValues]:
        return [replace(r, run_id=f"{sha}{i}", provenance={"git_sha": sha * 40}, **changes) for i, r in enumerate(runs)]

    noisy_times = (0.011, 0.020, 0.013, 0.018, 0.015)
    base = with_sha([replace(r, step_s=t, flops_per_step=1e9, hlo_hash="aa") for r, t in zip(BASE, noisy_times, strict=True)], "a")
    machine = check_sets(base, with_sha(base, "b"))
    text = render_markdown(machine)
    assert machine.verdict == Verdict.BAD_DATA and machine.commits == (("a" * 40,), ("b" * 40,))
    assert "**Whose is it:** the machine's" in text and "the step's program is the same" in text
    assert f"baseline {'a' * 12}; candidate {'b' * 12}" in text and "--pair-by tag:pair" in text
    pr = check_sets(base, with_sha(base, "b", flops_per_step=1.148e9, hlo_hash="bb", peak_memory_bytes=1_300_000))
    text = render_markdown(pr)
    assert pr.verdict == Verdict.REGRESSION and "**Whose is it:** the PR's" in text
    assert "FLOPs per step: 1.00 GFLOP -> 1.15 GFLOP" in text and "step HLO hash: aa -> bb" in text


def test_pairs_needed_is_the_smallest_n_whose_paired_interval_decides() -> None:
    """The paired check's count uses the one search of `welch.samples_needed` with the paired
    half-width t(0.95, n-1) * sd / sqrt(n); at that many pairs the paired interval decides."""
    from tpu_perf.analyzers.paired import compare_pairs, pairs_needed

    s = 0.02
    logs = np.linspace(-1, 1, 4)
    d = logs / logs.std(ddof=1) * s + 0.01  # +1 % per pair, sd 2 %: straddles the 3 % margin
    comp = compare_pairs([1.0] * 4, np.exp(d).tolist(), alpha=0.05)
    n = pairs_needed(comp, lower_is_better=True, margin=0.03, alpha=0.05)
    assert n is not None and n > 4

    def width(k: int) -> float:
        return stats.t.ppf(0.95, k - 1) * s / math.sqrt(k)

    assert width(n) < LIMIT - 0.01 <= width(n - 1)
    many = np.linspace(-1, 1, n)
    many = many / many.std(ddof=1) * s + 0.01
    decided = compare_pairs([1.0] * n, np.exp(many).tolist(), alpha=0.05)
    assert math.exp(LIMIT) > decided.high  # the high end is now under the margin
