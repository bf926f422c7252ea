"""The deterministic tier of `tpu-perf check`: when the compiled step program is the same on both
sides (hash, FLOPs, bytes accessed, peak memory, compiles, and the TPU compile metrics where
present) and the timing cannot be judged on this runner, the verdict is UNCHANGED (exit 0), saying
what the noise hid. Timed readings that this runner's noise can explain are held to it here too:
the all-in guard of the steady basis, and a paired reading within the runs' own run-to-run spread
(docs/ci.md, "On a CPU runner or a TPU runner" and "Timing on a shared CPU")."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from tpu_perf.analyzers.decide import detectable_text, percent
from tpu_perf.analyzers.exact import LABELS
from tpu_perf.analyzers.paired import METHOD as PAIRED_METHOD
from tpu_perf.analyzers.timing import CPU_METRIC
from tpu_perf.analyzers.verdicts import Check, Verdict

PROGRAM_CHECKS: tuple[str, ...] = ("hlo", "flops_per_step", "bytes_accessed", "peak_memory", "compiles")
"""The deterministic tier: what must be known and unchanged for an unjudged timing to be UNCHANGED."""

MIN_PAIRS = 3
"""Pairs an unchanged program's paired timing needs before it may decide. A process keeps its speed
mode for its life, so two runs a side can all sit in one mode each and agree to a fraction of a
percent: a comment-only PR read +6.2 % on both clocks from 2 pairs (pair ratios' CV 0.2 %, each
side's 0.4-0.7 %) in a full CI run, and passed alone. Two values say nothing of the spread between
runs; a third can (docs/ci.md's workflow records 5)."""


def program_tier(checks: Sequence[Check], *, basis: str, statistical: Collection[str], unpaired: Callable[[Check], Check]) -> list[Check]:
    """When the only deciding checks that did not pass are timed ones the noise left undecided
    (BAD_DATA from noise, INCONCLUSIVE), and every deterministic number of the step program is
    known and the same on both sides (PROGRAM_CHECKS, and the TPU compile metrics where present),
    those timed checks stop deciding and an UNCHANGED check says so, with the slowdown this
    runner's noise hides (exit 0). Otherwise `checks` as they are. A paired REGRESSION within the
    sides' own run-to-run noise (`_within_run_noise`) and the all-in guard of the steady basis
    (`_quiet_guards`) are held to that noise too. `statistical` names the timed metrics; `unpaired`
    judges a check's values again without pairing them (regression.check_metric: this module sits
    below regression.py, which applies the tier)."""
    given = list(checks)
    by = {c.name: c for c in checks}
    exact = [c for c in checks if c.name in PROGRAM_CHECKS or c.name.startswith("aot_")]
    if any(name not in by for name in PROGRAM_CHECKS) or any(c.verdict != Verdict.PASS for c in exact):
        return given
    timed = [c for c in checks if c.decides and c.name in statistical]
    floors = {c.name: floor for c in timed if (floor := _within_run_noise(c, unpaired)) is not None}
    timed = [replace(c, detectable=floors[c.name]) if c.name in floors else c for c in timed]
    checks = [next((t for t in timed if t.name == c.name), c) if c.name in floors else c for c in checks]
    wall = by.get("step_time")
    crossed = {c.name for c in timed if _clocks_disagree(c, wall)}
    undecided = [c for c in timed if (c.verdict in (Verdict.BAD_DATA, Verdict.INCONCLUSIVE) or c.name in floors or c.name in crossed) and c.detectable is not None]
    if not undecided:
        return given
    hidden = max((c.detectable for c in undecided if c.name == basis and c.detectable is not None), default=max(c.detectable or 0.0 for c in undecided))
    # a wall-clock guard is held to the wall clock's noise where CPU time is the basis
    guard_hidden = max(hidden, wall.detectable or 0.0) if basis != "step_time" and wall is not None else hidden
    undecided += _quiet_guards(timed, basis=basis, undecided=undecided, hidden=guard_hidden)
    others = [c for c in checks if c.decides and c not in undecided]
    if any(c.verdict not in (Verdict.PASS, Verdict.IMPROVEMENT) for c in others):
        return given
    names = ", ".join(LABELS[n][1] if n in LABELS else n.replace("_", " ") for n in PROGRAM_CHECKS)
    message = f"the compiled program is unchanged ({names}: the same on both sides); timing was not judged: this runner's noise hides changes below {detectable_text(hidden)} (--require-timing makes that a failure)"
    kept = [replace(c, decides=False, message=f"{c.message} (not deciding: {_why_not(c, guard_hidden if c.name == 'all_in_step_time' else hidden, within_runs=c.name in floors, wall=wall if c.name in crossed else None)})") if c in undecided else c for c in checks]
    return [*kept, Check(name="program", verdict=Verdict.UNCHANGED, message=message, detectable=hidden)]


def _quiet_guards(timed: Sequence[Check], *, basis: str, undecided: Sequence[Check], hidden: float) -> list[Check]:
    """The all-in guards of the steady basis whose REGRESSION this runner's noise can explain.
    All-in is the steady steps plus the recompiles and evals; with the program and its compile
    counts unchanged and the steady step undecided, an all-in slowdown is the same work taking
    longer, which a shared runner does by itself. It decides alone only when its whole interval
    clears the noise measured on the steady step (low bound above +`hidden`): a slower step every
    N steps, or slower evals, past what the noise hides."""
    if basis == "all_in_step_time" or not any(c.name == basis for c in undecided):
        return []
    return [c for c in timed if c.name == "all_in_step_time" and c.verdict == Verdict.REGRESSION and (c.low is None or c.low <= 1 + hidden)]


def _within_run_noise(check: Check, unpaired: Callable[[Check], Check]) -> float | None:
    """For a paired REGRESSION (or IMPROVEMENT) of an unchanged program: the change the runs' own
    spread hides (the unpaired check's `detectable` on the same values), when the paired interval's
    near end does not clear it (for an IMPROVEMENT, its high end stays above 1 / (1 + that)); else None. Pairing cancels only what the two runs of a pair share. With the compiled
    program the same, what is left to differ is the host code and the machine, and what a process
    does not share with its partner is not cancelled: one of two speed modes it keeps for its life
    (3.5-4.4 against 7-10 ms a step here), or a process CPU time a few percent off its partner's (the
    unchanged candidate's read +3.9 % on the median pair, within a 4.9 % spread between runs); a few
    pairs that happen to agree then read as a confident change. So such a reading must stand against
    the noise measured between runs too, whatever --max-cv says (docs/ci.md, "Timing on a shared
    CPU"); a changed program, or --require-timing, lets the pairs decide alone."""
    if check.method != PAIRED_METHOD or check.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or check.low is None or check.high is None:
        return None
    detectable = unpaired(check).detectable
    worse = check.low if check.lower_is_better == (check.verdict == Verdict.REGRESSION) else 1 / check.high  # the near end, as a slowdown
    if _pairs(check) < MIN_PAIRS:  # too few runs to see the spread between them: it hides at least this reading
        far = check.high if check.lower_is_better == (check.verdict == Verdict.REGRESSION) else 1 / check.low
        return max(detectable or 0.0, abs(far - 1))
    if detectable is None:
        return None
    return detectable if worse <= 1 + detectable else None


def _pairs(check: Check) -> int:
    return min(len(check.baseline), len(check.candidate))


def _clocks_disagree(check: Check, wall: Check | None) -> bool:
    """A CPU-time REGRESSION (or IMPROVEMENT) of an unchanged program whose wall-clock step time
    moved the other way, or not at all. The same compiled program doing more work takes more CPU
    and, on the same cores, more wall time; more CPU time at the same or less wall time is the same
    work spread over more threads: XLA:CPU's workers run a step in parallel when cores are free and
    spin while they wait (measured here: runs of one program at 0.84-0.95 ms of CPU a step and
    others at 1.12-1.22 ms, the latter at 0.79-0.82 ms of wall time against 0.84-0.95). A process
    keeps that mode for its life, so two runs a side can both sit in it."""
    if check.name != CPU_METRIC or check.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or check.ratio is None:
        return False
    if wall is None or wall.ratio is None:
        return False
    return (wall.ratio - 1) * (check.ratio - 1) <= 0


def _why_not(check: Check, hidden: float, *, within_runs: bool, wall: Check | None = None) -> str:
    if wall is not None and wall.ratio is not None:  # CPU time against the wall clock
        return (f"the compiled program is unchanged and the wall-clock step time moved the other way ({percent(wall.ratio)}): "
                "more CPU time at the same or less wall time is the same work on more threads at once, not more work")
    if within_runs and _pairs(check) < MIN_PAIRS:
        return (f"the compiled program is unchanged, and {_pairs(check)} pair(s) cannot tell the code from a run's speed, which a process "
                f"keeps for its life: {MIN_PAIRS} pairs at least before an unchanged program's timing decides")
    if within_runs:  # a paired reading within the runs' own noise
        end, value = ("low", check.low) if (check.verdict == Verdict.REGRESSION) == check.lower_is_better else ("high", check.high)
        return f"the compiled program is unchanged, and the paired interval's {end} end ({percent(value) if value else 'n/a'}) does not clear the {detectable_text(check.detectable or hidden)} the runs' own spread hides, either way (pairing cancels only what a pair shares)"
    if check.verdict == Verdict.REGRESSION:  # a quieted all-in guard
        return f"the compiled program and its compile counts are unchanged and the steady step is undecided; the all-in interval's low end ({percent(check.low) if check.low else 'n/a'}) does not clear the {detectable_text(hidden)} this runner's noise hides"
    return "the compiled program is unchanged"
