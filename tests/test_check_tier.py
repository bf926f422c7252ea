"""The deterministic tier: an unchanged compiled program whose timing this runner cannot judge exits
0 as UNCHANGED (saying what noise hid), `--require-timing` keeps the timing's verdict, a changed
program is named with its numbers, and the wording of crashed runs and memory regressions (values
in; the recorded end-to-end cases are tests/test_ci_workflow.py)."""

from __future__ import annotations

from dataclasses import replace
from xml.etree import ElementTree as ET

import pytest

from tpu_perf.analyzers.regression import (
    METRIC_BY_NAME,
    CheckOptions,
    CheckResult,
    RunValues,
    Verdict,
    check_metric,
    check_sets,
)
from tpu_perf.analyzers.verdict import speed_sentence
from tpu_perf.views.check import github_annotations, render_junit, render_markdown

TIMES = (0.011, 0.020, 0.013, 0.018, 0.015)
"""A shared runner flipping between ~11 and ~20 ms: per-side CV about 20 %."""


def run(i: int, step_s: float, **changes: object) -> RunValues:
    values = RunValues(
        run_id=f"r{i}", name="train", status="completed", step_s=step_s, mfu=None, tokens_per_s=None,
        peak_memory_bytes=1_000_000, peak_memory_source="xla_memory_analysis", compiles_after_warmup=0, steady_steps=50,
        fingerprint={"chip": "cpu", "framework": "jax"}, hlo_hash="5eed5eed5eed5eed", flops_per_step=968.1e6, bytes_accessed=3.2e6,
        all_in_s=step_s * 1.01,
    )
    return replace(values, **changes)  # type: ignore[arg-type]


def sides(**candidate: object) -> tuple[list[RunValues], list[RunValues]]:
    base = [run(i, t) for i, t in enumerate(TIMES)]
    cand = [run(10 + i, TIMES[(i + 2) % 5], **candidate) for i in range(5)]
    return base, cand


def junit_failures(result: CheckResult) -> int:
    return int(ET.fromstring(render_junit(result).split("\n", 1)[1]).get("failures", "0"))


def test_unchanged_program_under_timing_noise_exits_0_and_says_what_noise_hid() -> None:
    result = check_sets(*sides())
    assert (result.verdict, result.exit_code) == (Verdict.UNCHANGED, 0)
    tier = next(c for c in result.checks if c.name == "program")
    step = next(c for c in result.checks if c.name == "step_time")
    assert step.verdict == Verdict.BAD_DATA and not step.decides  # shown, not deciding
    assert tier.detectable == step.detectable and tier.detectable > 0.3  # 20 % noise with 5 runs hides a lot
    assert f"this runner's noise hides changes below +{tier.detectable * 100:.1f} %" in tier.message
    assert "the compiled program is unchanged" in tier.message
    assert junit_failures(result) == 0 and not any(line.startswith("::error") for line in github_annotations(result))
    assert "nobody's" in render_markdown(result)


def test_require_timing_keeps_the_timing_verdict() -> None:
    result = check_sets(*sides(), CheckOptions(require_timing=True))
    assert (result.verdict, result.exit_code) == (Verdict.BAD_DATA, 4)
    assert not any(c.name == "program" for c in result.checks)


@pytest.mark.parametrize(("field", "value"), [("hlo_hash", "feedfacefeedface"), ("flops_per_step", 974.9e6), ("bytes_accessed", 3.3e6), ("compiles_after_warmup", 1), ("peak_memory_bytes", 1_300_000), ("flops_per_step", None)])
def test_any_changed_or_unknown_program_number_is_not_unchanged(field: str, value: object) -> None:
    result = check_sets(*sides(**{field: value}))
    assert result.verdict != Verdict.UNCHANGED and result.exit_code != 0


def test_a_changed_computation_is_named_with_its_numbers_and_owner() -> None:
    result = check_sets(*sides(flops_per_step=968.1e6 * 1.007))
    flops = next(c for c in result.checks if c.name == "flops_per_step")
    assert flops.verdict == Verdict.CHANGED
    assert "968.1 MFLOP -> 974.9 MFLOP (+0.70 %)" in flops.message and "the PR's code's doing" in flops.message
    assert "**What the PR changed:** FLOPs per step: 968.1 MFLOP -> 974.9 MFLOP (+0.70 %)" in render_markdown(result)


def test_a_crashed_candidate_is_the_prs_and_gets_no_timing_error() -> None:
    base, cand = sides()
    cand[3] = replace(cand[3], status="failed", error="RuntimeError: the PR broke the step", all_in_s=0.5, steady_steps=1)
    result = check_sets(base, cand)
    assert (result.verdict, result.exit_code) == (Verdict.BAD_DATA, 4) and result.broken == ("candidate",)
    errors = [line for line in github_annotations(result) if line.startswith("::error")]
    assert len(errors) == 1 and "check runs" in errors[0]  # not one more from all_in_step_time on the crashed run's 3 steps
    assert "**Whose is it:** the PR's" in render_markdown(result)


def test_a_crashed_baseline_is_not_the_prs() -> None:
    base, cand = sides()
    base[0] = replace(base[0], status="failed", error="OSError: disk full")
    assert "**Whose is it:** the baseline's" in render_markdown(check_sets(base, cand))


def test_a_memory_regression_heads_the_sentence() -> None:
    base, cand = sides(peak_memory_bytes=1_300_000)
    result = check_sets(base, cand)
    assert (result.verdict, result.exit_code) == (Verdict.REGRESSION, 1)
    text = speed_sentence("the baseline (5 runs)", "the candidate (5 runs)", base, cand, result).text
    assert text.startswith("REGRESSION in peak memory: 1.0 MiB -> 1.2 MiB (+30.0 %). Speed: No clear winner"), text


def test_an_all_in_guard_within_the_runners_noise_does_not_decide_alone() -> None:
    """The false REGRESSION of a comment-only PR on a loaded runner: steady step undecided, program
    and compile counts unchanged, all-in +12.5 % with little spread. Just below the noise the steady
    step measured, the guard is shown and quieted; just above it, it decides."""
    base, cand = sides()
    steady = check_sets(base, cand)
    hidden = next(c for c in steady.checks if c.name == "program").detectable
    jitter = (1.0, 1.004, 0.998, 1.002, 0.999)

    def with_all_in(factor: float) -> CheckResult:
        return check_sets([replace(r, all_in_s=0.02 * j) for r, j in zip(base, jitter, strict=True)], [replace(r, all_in_s=0.02 * factor * j) for r, j in zip(cand, jitter, strict=True)])

    quiet = with_all_in(1.125)
    guard = next(c for c in quiet.checks if c.name == "all_in_step_time")
    assert guard.verdict == Verdict.REGRESSION and not guard.decides and 1.03 < guard.low < 1 + hidden
    assert (quiet.verdict, quiet.exit_code) == (Verdict.UNCHANGED, 0)
    assert "does not clear the" in guard.message and "this runner's noise hides" in guard.message
    loud = with_all_in((1 + hidden) * 1.02)  # a slower step every N steps, past the noise: decides
    guard = next(c for c in loud.checks if c.name == "all_in_step_time")
    assert guard.decides and guard.low > 1 + hidden and (loud.verdict, loud.exit_code) == (Verdict.REGRESSION, 1)
    recompiles = check_sets([replace(r, all_in_s=0.02 * j) for r, j in zip(base, jitter, strict=True)], [replace(r, all_in_s=0.0225 * j, compiles_after_warmup=3) for r, j in zip(cand, jitter, strict=True)])
    assert recompiles.verdict == Verdict.REGRESSION  # compile counts changed: the guard's own case


NOISY = (0.0039, 0.0098, 0.0043, 0.0092, 0.0040)
"""Five baseline runs of one step, each process in one of two speed modes for its life (4 or 9 ms):
what this runner showed beside a busy process (docs/ci.md, "Timing on a shared CPU")."""


def paired(base_s: tuple[float, ...], factor: float, **candidate: object) -> tuple[list[RunValues], list[RunValues]]:
    jitter = (1.0, 1.02, 0.99, 1.01, 0.985)
    base = [run(i, t, tags={"pair": str(i)}) for i, t in enumerate(base_s)]
    cand = [run(10 + i, t * factor * j, tags={"pair": str(i)}, **candidate) for i, (t, j) in enumerate(zip(base_s, jitter, strict=True))]
    return base, cand


def test_a_paired_slowdown_within_the_runs_own_noise_does_not_fail_an_unchanged_program() -> None:
    """Pairs that agree on +30 % while each side's runs spread 45 %: with the compiled program the
    same, the runs' own spread (the unpaired check's smallest detectable change) must be cleared."""
    options = CheckOptions(pair_by="pair")
    base, cand = paired(NOISY, 1.3)
    floor = check_metric(METRIC_BY_NAME["step_time"], [r.step_s for r in base], [r.step_s for r in cand], options).detectable
    result = check_sets(base, cand, options)
    step = next(c for c in result.checks if c.name == "step_time")
    assert step.verdict == Verdict.REGRESSION and not step.decides and step.low <= 1 + floor  # shown, not deciding
    assert (result.verdict, result.exit_code) == (Verdict.UNCHANGED, 0) and "the runs' own spread hides" in step.message
    above = paired(NOISY, (1 + floor) * 1.15)  # past what the spread hides: decides
    assert check_sets(*above, options).verdict == Verdict.REGRESSION
    quiet = paired(tuple(0.004 * j for j in (1.0, 1.01, 0.99, 1.0, 1.005)), 1.3)  # quiet sides: the pairs decide
    assert check_sets(*quiet, options).verdict == Verdict.REGRESSION
    changed = paired(NOISY, 1.3, hlo_hash="feedfacefeedface")  # a changed program: the pairs decide
    assert check_sets(*changed, options).verdict == Verdict.REGRESSION
    assert check_sets(*paired(NOISY, 1.3), CheckOptions(pair_by="pair", require_timing=True)).verdict == Verdict.REGRESSION


CPU = (0.0036, 0.0037, 0.0035, 0.0038, 0.0036)
"""The same five baseline runs' process CPU time per step: the busy neighbour that split their wall
time into 4 and 9 ms modes moved it by a few percent (docs/ci.md, "Timing on a shared CPU")."""


def cpu_paired(factor: float, *, cpu: tuple[float, ...] = CPU, wall: tuple[float, ...] = NOISY, wall_factor: float = 1.0, **candidate: object) -> tuple[list[RunValues], list[RunValues]]:
    """Pairs whose wall times keep the speed modes (the candidate's in the other mode, times
    `wall_factor`) and whose CPU times move by `factor` (a small jitter of each run's own): pairing
    cannot cancel the modes."""
    jitter = (1.0, 1.01, 0.995, 1.005, 0.99)
    base = [run(i, w, cpu_step_s=c, tags={"pair": str(i)}) for i, (w, c) in enumerate(zip(wall, cpu, strict=True))]
    cand = [run(10 + i, w * wall_factor, cpu_step_s=c * factor * j, tags={"pair": str(i)}, **candidate) for i, (w, c, j) in enumerate(zip((*wall[1:], wall[0]), cpu, jitter, strict=True))]
    return base, cand


def test_timing_cpu_times_the_step_by_cpu_time_on_a_cpu_runner_and_says_so() -> None:
    """`--timing cpu`: the CPU time per step decides (step time shown, not deciding), and every
    surface says which clock decided and why; a program whose CPU time is 30 % more fails."""
    options = CheckOptions(pair_by="pair", timing="cpu")
    same = check_sets(*cpu_paired(1.0), options)
    by = {c.name: c for c in same.checks}
    assert same.basis == "cpu_step_time" and by["cpu_step_time"].decides and not by["step_time"].decides
    assert (same.verdict, same.exit_code) == (Verdict.PASS, 0) and by["cpu_step_time"].verdict == Verdict.PASS
    assert "CPU time per step decides (--timing cpu)" in same.timing_reason and "CPU time per step decides" in by["step_time"].message
    same = replace(same, sentence=speed_sentence("main", "pr", *cpu_paired(1.0), same).text)
    assert "CPU time per step (the process's, every thread)" in same.sentence and same.timing_reason in same.sentence
    assert "Timing: CPU time per step decides" in render_markdown(same)
    assert ET.fromstring(render_junit(same).split("\n", 1)[1]).find("testsuite/properties/property").get("name") == "timing"
    slower = check_sets(*cpu_paired(1.3, hlo_hash="feedfacefeedface"), options)
    assert (slower.verdict, slower.exit_code) == (Verdict.REGRESSION, 1) and next(c for c in slower.checks if c.name == "cpu_step_time").verdict == Verdict.REGRESSION
    wall = check_sets(*cpu_paired(1.0), CheckOptions(pair_by="pair"))  # the default: wall time, no word on clocks
    assert wall.basis == "step_time" and wall.timing_reason is None and "cpu_step_time" not in {c.name for c in wall.checks}


@pytest.mark.parametrize(("case", "words"), [
    ("tpu", "candidate run r10 ran on TPU v6e"),
    ("unrecorded", "no CPU time per step recorded in candidate run r10"),
    ("waits", "candidate run r10 used the CPU for 24% of its step"),
    ("computes", None),
])
def test_timing_cpu_falls_back_to_wall_time_and_names_the_run(case: str, words: str | None) -> None:
    """CPU time stands in only on a CPU, where recorded, and for a step that computes (at least
    CPU_BOUND_SHARE of it on the CPU: 24 % falls back, 26 % does not)."""
    base, cand = cpu_paired(1.0)
    first = {"tpu": {"fingerprint": {"chip": "TPU v6e", "framework": "jax"}}, "unrecorded": {"cpu_step_s": None},
             "waits": {"cpu_step_s": 0.24 * cand[0].step_s}, "computes": {"cpu_step_s": 0.26 * cand[0].step_s}}[case]
    result = check_sets(base, [replace(cand[0], **first), *cand[1:]], CheckOptions(pair_by="pair", timing="cpu"))
    if words is None:
        assert result.basis == "cpu_step_time", result.timing_reason
        return
    assert result.basis == "step_time" and result.timing_reason.startswith("wall time decides") and words in result.timing_reason, result.timing_reason
    assert "cpu_step_time" not in {c.name for c in result.checks}


def test_a_paired_cpu_reading_within_the_runs_spread_does_not_fail_an_unchanged_program() -> None:
    """The false REGRESSION process CPU time gave on real runs: pairs that agree on a few percent
    while the runs spread about as much between them (below --max-cv). With the program the same,
    the paired interval's near end must clear what that spread hides, either way; past it, it
    decides; a changed program lets the pairs decide alone."""
    options = CheckOptions(pair_by="pair", timing="cpu")
    base, cand = cpu_paired(1.06, wall_factor=1.05)  # the wall clock slower too (the next test is when it is not)
    floor = check_metric(METRIC_BY_NAME["cpu_step_time"], [r.cpu_step_s for r in base], [r.cpu_step_s for r in cand], options).detectable
    result = check_sets(base, cand, options)
    step = next(c for c in result.checks if c.name == "cpu_step_time")
    assert max(step.baseline_cv, step.candidate_cv) < options.max_cv  # the rule holds below --max-cv too
    assert step.verdict == Verdict.REGRESSION and not step.decides and step.low <= 1 + floor
    assert (result.verdict, result.exit_code) == (Verdict.UNCHANGED, 0) and "the runs' own spread hides" in step.message
    assert check_sets(*cpu_paired((1 + floor) * 1.1, wall_factor=1.05), options).verdict == Verdict.REGRESSION  # the wall clock slower too (below)
    assert check_sets(*cpu_paired(1.06, hlo_hash="feedfacefeedface"), options).verdict == Verdict.REGRESSION
    faster = check_sets(*cpu_paired(1 / 1.06, wall_factor=0.95), options)  # the same holds for a faster reading
    step = next(c for c in faster.checks if c.name == "cpu_step_time")
    assert step.verdict == Verdict.IMPROVEMENT and not step.decides and "high end" in step.message and faster.verdict == Verdict.UNCHANGED
    assert check_sets(*cpu_paired(1 / ((1 + floor) * 1.1), wall_factor=0.95), options).verdict == Verdict.IMPROVEMENT


def test_the_wall_all_in_guard_is_held_to_the_wall_clocks_noise_under_cpu_timing() -> None:
    """With CPU time the basis, the all-in guard (a wall-clock time) decides alone only past the
    noise the wall-clock step showed, not the CPU time's smaller one."""
    options = CheckOptions(pair_by="pair", timing="cpu")
    base, cand = cpu_paired(1.06)  # undecided: within the runs' spread (above)
    hidden_cpu = next(c for c in check_sets(base, cand, options).checks if c.name == "program").detectable
    jitter = (1.0, 1.004, 0.998, 1.002, 0.999)
    factor = (1 + hidden_cpu) * 1.3  # past the CPU time's noise, within the wall time's
    result = check_sets([replace(r, all_in_s=0.02 * j) for r, j in zip(base, jitter, strict=True)], [replace(r, all_in_s=0.02 * factor * j) for r, j in zip(cand, jitter, strict=True)], options)
    guard = next(c for c in result.checks if c.name == "all_in_step_time")
    wall = next(c for c in result.checks if c.name == "step_time")
    assert guard.verdict == Verdict.REGRESSION and guard.low > 1 + hidden_cpu and guard.low <= 1 + wall.detectable and not guard.decides
    assert (result.verdict, result.exit_code) == (Verdict.UNCHANGED, 0)


def test_more_cpu_time_at_less_wall_time_does_not_fail_an_unchanged_program() -> None:
    """Seen on this runner: two candidate runs of the unchanged program in the mode where XLA:CPU's
    workers run the step on more threads at once (1.12-1.22 ms of CPU a step at 0.79-0.82 ms of
    wall, against 0.84-0.95 ms of both), paired against two baseline runs that were not: CPU time
    +23 % with confidence, wall time -10 %. Not more work, so not a REGRESSION of the same program;
    with the wall clock slower too it decides, and a changed program decides on CPU time alone."""
    options = CheckOptions(pair_by="pair", timing="cpu")
    base = [run(i, w, cpu_step_s=w, tags={"pair": str(i)}) for i, w in enumerate((0.000915, 0.000908, 0.000911))]

    def cand(wall_factor: float, **changes: object) -> list[RunValues]:
        return [run(10 + i, b.step_s * wall_factor * j, cpu_step_s=c, tags={"pair": str(i)}, **changes) for i, (b, c, j) in enumerate(zip(base, (0.001131, 0.001118, 0.001125), (1.0, 1.01, 1.005), strict=True))]

    crossed = check_sets(base, cand(0.88), options)
    step = next(c for c in crossed.checks if c.name == "cpu_step_time")
    assert step.verdict == Verdict.REGRESSION and not step.decides and "wall-clock step time moved the other way" in step.message
    assert crossed.exit_code == 0 and crossed.verdict != Verdict.REGRESSION and any(c.verdict == Verdict.UNCHANGED for c in crossed.checks)
    assert check_sets(base, cand(1.2), options).verdict == Verdict.REGRESSION  # both clocks slower: decides
    assert check_sets(base, cand(0.88, hlo_hash="feedfacefeedface"), options).verdict == Verdict.REGRESSION


def test_two_pairs_that_agree_do_not_fail_an_unchanged_program() -> None:
    """The false REGRESSION of a full CI run: a comment-only PR read +6.2 % on both clocks from two
    pairs that agreed to 0.2 % (each side's runs within 0.7 %). Two runs a side cannot show the
    spread between runs; with the program unchanged they do not decide, and a third pair can."""
    options = CheckOptions(pair_by="pair")
    steps = (0.0040, 0.00401, 0.00399)
    base = [run(i, t, tags={"pair": str(i)}) for i, t in enumerate(steps)]
    cand = [run(10 + i, t * 1.062 * (1.0005 if i % 2 else 0.9995), tags={"pair": str(i)}) for i, t in enumerate(steps)]
    two = check_sets(base[:2], cand[:2], options)
    step = next(c for c in two.checks if c.name == "step_time")
    assert step.verdict == Verdict.REGRESSION and not step.decides and "2 pair(s) cannot tell the code" in step.message
    assert (two.verdict, two.exit_code) == (Verdict.UNCHANGED, 0)
    assert check_sets(base, cand, options).verdict == Verdict.REGRESSION  # three pairs: the pairs decide
    changed = [replace(c, hlo_hash="feedfacefeedface") for c in cand[:2]]
    assert check_sets(base[:2], changed, options).verdict == Verdict.REGRESSION  # a changed program: two pairs decide
