"""Words for the pull request's author, leading the Markdown summary of `tpu-perf check`.

Four lines: what the PR changed (the exact tier: FLOPs per step, the step's HLO, memory, compiles),
whose the failure can be (the PR's when its program changed; the machine's when only the timing
noise stops the verdict), both commits, and what to do.
"""

from __future__ import annotations

from tpu_perf.analyzers.regression import CheckResult
from tpu_perf.analyzers.verdicts import Check, Verdict

EXACT = ("flops_per_step", "bytes_accessed", "hlo", "peak_memory", "compiles")
"""Checks whose change can only be the code's (or the environment's), never the machine's noise."""


def author_summary(result: CheckResult) -> list[str]:
    """Markdown lines: what changed, whose it is, the commits, what to do."""
    decided = [c for c in result.checks if c.decides]
    exact = [c for c in decided if c.name.split("[")[0] in EXACT or c.name.startswith("aot_")]
    changed = [c for c in exact if c.verdict in (Verdict.CHANGED, Verdict.REGRESSION, Verdict.IMPROVEMENT)]
    what = "; ".join(c.message for c in changed) if changed else ("the step's program is the same (" + ", ".join(c.name for c in exact) + " unchanged)" if exact else "not known (these runs have no FLOPs, HLO, memory or compile counts)")
    whose, todo = _whose(result, decided, changed)
    base, cand = (", ".join(_short(s) for s in side) or "not recorded" for side in result.commits)
    return [f"- **What the PR changed:** {what}", f"- **Whose is it:** {whose}", f"- **Commits:** baseline {base}; candidate {cand}", f"- **What to do:** {todo}", ""]


def _whose(result: CheckResult, decided: list[Check], changed: list[Check]) -> tuple[str, str]:
    verdict = result.verdict
    runs = next((c for c in decided if c.name in ("runs", "pairs") and c.verdict == Verdict.BAD_DATA), None)
    noisy = [c for c in decided if c.verdict == Verdict.BAD_DATA and "noise" in c.message]
    if verdict == Verdict.NOT_COMPARABLE:
        return (f"neither side's speed: the runs differ in {', '.join(result.differing_fields)}",
                "record both sides in the same environment (or --ignore-fingerprint a field the PR changes on purpose)")
    if runs is not None and "candidate" in result.broken:
        return f"the PR's: its code did not complete a run ({runs.message})", "read the candidate run's error (`tpu-perf report RUN`) and fix the PR"
    if runs is not None and "baseline" in result.broken:
        return f"the baseline's (the target branch or the runner), not the PR's: {runs.message}", "read the baseline run's error (`tpu-perf report RUN`); rerun the job once the target branch runs"
    if runs is not None:
        return f"nobody's code: the runs cannot be judged ({runs.message})", "record the runs the message asks for, then rerun the job"
    if verdict == Verdict.UNCHANGED:
        tier = next(c for c in result.checks if c.verdict == Verdict.UNCHANGED)
        needed = next((c.runs_needed for c in result.checks if c.runs_needed and not c.decides), None)
        more = f" (about {needed} runs or pairs a side would judge it here)" if needed else ""
        return f"nobody's: {tier.message}", f"nothing; to have the timing judged too, use a quieter runner or more pairs{more}"
    if verdict == Verdict.REGRESSION:
        if changed:
            return "the PR's: its program changed (above), so the slowdown comes with the code", "look at the change above; if the extra work is intended, accept it knowingly"
        return "most likely the PR's: the slowdown is beyond the noise and the margin with confidence, though the program's FLOPs and HLO did not change", "profile both sides (`tpu-perf compare`); rerun the job if the runner was shared"
    if verdict == Verdict.BAD_DATA and noisy and not changed:
        return "the machine's: run-to-run noise stops the verdict and nothing in the program changed", "rerun the job, record in back-to-back pairs (`--pair-by tag:pair`, docs/ci.md), or use a quieter runner"
    if verdict == Verdict.BAD_DATA:
        return "unclear: the data cannot be judged (see the table)", "fix what the table names, then rerun the job"
    if verdict == Verdict.INCONCLUSIVE:
        needed = next((c.runs_needed for c in decided if c.runs_needed), None)
        more = f"about {needed} runs (or pairs) a side" if needed else "more runs a side"
        return ("the PR's program changed, but whether it costs time is not yet clear" if changed else "nobody's yet: the change is too small to tell from this noise"), f"rerun with {more}, or accept it as within noise"
    if verdict == Verdict.CHANGED:
        return "the PR's: its program does different work, at no measurable cost", "check that the change of work is intended"
    return "nothing to blame: no slowdown", "nothing"


def _short(sha: str) -> str:
    return sha[:12] + (" (dirty)" if sha.endswith("+dirty") else "")
