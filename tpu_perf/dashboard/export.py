"""A comparison to take away: Markdown (the verdict, then `tpu-perf check`'s own table for each
candidate against the baseline) and CSV (every KPI of every run, in SI units, with its change).

The check is `check_sets` with its default options and its table is `views.check.render_markdown`,
the code behind `tpu-perf check --markdown`, so the exported table is the one CI writes for the
same runs, and the verdict sentence (`verdict.speed_sentence`) is read off that same result.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from tpu_perf.analyzers import verdict
from tpu_perf.analyzers.regression import CheckResult, check_sets
from tpu_perf.analyzers.run_values import RunValues
from tpu_perf.dashboard import data
from tpu_perf.views.check import render_markdown
from tpu_perf.views.format import md, md_code


@dataclass(frozen=True, kw_only=True)
class Checked:
    """`tpu-perf check` between two sides of a comparison (single runs, or repeat groups)."""

    baseline: str
    candidate: str
    result: CheckResult
    groups: bool
    """True: the sides are `repeat=` groups (`baseline` and `candidate` are group names)."""
    sentence: verdict.Sentence
    """The verdict in words, from `result` (also in `result.sentence`)."""


def repeat_groups(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """{group: labels} of the repeat groups with two runs or more (what `tpu-perf check` can judge)."""
    tags = {label: data.dig(doc, "run.tags") or {} for label, doc in docs.items()}
    return {g: labels for g, labels in verdict.repeat_groups(tags).items() if len(labels) >= 2}


def checks(docs: Mapping[str, Mapping[str, Any]], refs: Mapping[str, data.RunRef], baseline: str) -> list[Checked]:
    """Each repeat group against the baseline's group when there are two groups or more, else each
    run against the baseline run: `check_sets` with its defaults, as `tpu-perf check` runs it."""
    values: dict[str, RunValues] = {}

    def of(label: str) -> RunValues:
        if label not in values:
            values[label] = data.run_values(refs[label])
        return values[label]

    def checked(base: str, cand: str, base_labels: Sequence[str], cand_labels: Sequence[str], groups: bool) -> Checked:
        key = (base, cand, groups, tuple(_ref_key(refs[x]) for x in base_labels), tuple(_ref_key(refs[x]) for x in cand_labels))
        return data.CHECKS.get(key, lambda: _check(base, cand, [of(x) for x in base_labels], [of(x) for x in cand_labels], groups))

    groups = repeat_groups(docs)
    if len(groups) >= 2:
        base = next((g for g, labels in groups.items() if baseline in labels), next(iter(groups)))
        return [checked(base, g, groups[base], labels, True) for g, labels in groups.items() if g != base]
    return [checked(baseline, label, [baseline], [label], False) for label in docs if label != baseline]


def _ref_key(ref: data.RunRef) -> tuple[str, str, float, str]:
    """What a run's side of a check depends on: the run, its stamp, and its live status (a run that
    ends, or crashes, is checked again)."""
    return (ref.id, ref.url, ref.stamp, ref.status)


def _check(base: str, cand: str, b: list[RunValues], c: list[RunValues], groups: bool) -> Checked:
    names = (f"repeat={base}", f"repeat={cand}") if groups else (base, cand)
    result = check_sets(b, c)
    said = verdict.speed_sentence(*names, b, c, result)
    return Checked(baseline=base, candidate=cand, result=replace(result, sentence=said.text), groups=groups, sentence=said)


KPI_CHECKS: Mapping[str, str] = {
    "Step time": "step_time", "All-in step time": "all_in_step_time", "MFU": "mfu",
    "Tokens/s": "tokens_per_s", "Peak HBM": "peak_memory",
}
"""KPI rows whose change a check of the verdict judges; every other delta is shown grey."""


def claims(rows: pd.DataFrame, checked: Sequence[Checked]) -> list[bool]:
    """Per KPI row: may its delta be coloured? Only where the verdict can claim it: a deciding check
    of that metric whose interval excludes no change (deterministic ones: REGRESSION/IMPROVEMENT),
    for a run whose verdict is not "No clear winner" (that colours nothing)."""
    by_run: dict[str, Checked] = {}
    for c in checked:
        if not c.groups:
            by_run[c.candidate] = c
    out = []
    for kpi, run in zip(rows["kpi"], rows["run"], strict=True):
        c = by_run.get(run)
        check = next((x for x in c.result.checks if x.name == KPI_CHECKS.get(kpi)), None) if c else None
        out.append(check is not None and c is not None and c.sentence.kind != "unclear" and claimable(check))
    return out


def claimable(check: Any) -> bool:
    """A check's change is a claim: it decides, and its interval excludes 1 (or, without one, it is REGRESSION/IMPROVEMENT)."""
    if not check.decides or check.ratio is None:
        return False
    if check.low is not None and check.high is not None:
        return check.low > 1 or check.high < 1
    return check.verdict.value in ("REGRESSION", "IMPROVEMENT")


def comparison_markdown(sentences: Sequence[str], checked: Sequence[Checked], ids: Mapping[str, str], mismatch: str | None) -> str:
    """The verdict sentences, the like-for-like banner, then `tpu-perf check`'s table per candidate."""
    runs = ", ".join(f"{md(label)} ({md_code(run_id)})" for label, run_id in ids.items())
    lines = [f"## tpu-perf comparison: {runs}", ""]
    if mismatch:
        lines += [f"> {md(mismatch)}", ""]
    lines += [f"- {md(s)}" for s in sentences] + [""]
    for c in checked:
        side = "repeat=" if c.groups else ""
        lines += [f"#### {side}{md(c.candidate)} against {side}{md(c.baseline)}", "", render_markdown(c.result)]
    return "\n".join(lines)


CSV_COLUMNS = ["kpi", "run", "run_id", "baseline", "value", "unit", "change_vs_baseline", "lower_is_better", "why_unknown"]


def comparison_csv(rows: pd.DataFrame, ids: Mapping[str, str], baseline: str) -> str:
    """`compare.kpi_rows` as CSV: one row per KPI and run, values in SI units (s, bytes, fraction),
    the change against the baseline as a fraction; empty where unknown (never 0)."""
    out = pd.DataFrame({
        "kpi": rows["kpi"], "run": rows["run"], "run_id": rows["run"].map(ids), "baseline": baseline,
        "value": rows["value"], "unit": rows["unit"], "change_vs_baseline": rows["delta"],
        "lower_is_better": rows["lower_is_better"], "why_unknown": rows["why"],
    }, columns=CSV_COLUMNS)  # fmt: skip
    buffer = io.StringIO()
    out.to_csv(buffer, index=False)
    return buffer.getvalue()
