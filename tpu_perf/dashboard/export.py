"""A comparison to take away: Markdown (the verdict, then `tpu-perf check`'s own table for each
candidate against the baseline) and CSV (every KPI of every run, in SI units, with its change).

The check is `check_sets` with its default options and its table is `views.check.render_markdown`,
the code behind `tpu-perf check --markdown`, so the exported table is the one CI writes for the
same runs (a single run a side is BAD_DATA there too: check needs repeats to measure noise).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpu_perf.analyzers import verdict
from tpu_perf.analyzers.regression import CheckResult, check_sets
from tpu_perf.analyzers.run_values import RunValues, run_values
from tpu_perf.dashboard import data
from tpu_perf.views.check import render_markdown
from tpu_perf.views.format import md


@dataclass(frozen=True, kw_only=True)
class Checked:
    """`tpu-perf check` between two sides of a comparison (single runs, or repeat groups)."""

    baseline: str
    candidate: str
    result: CheckResult
    groups: bool
    """True: the sides are `repeat=` groups (`baseline` and `candidate` are group names)."""


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
            values[label] = run_values(data.open_run(refs[label].url, refs[label].stamp))
        return values[label]

    groups = repeat_groups(docs)
    if len(groups) >= 2:
        base = next((g for g, labels in groups.items() if baseline in labels), next(iter(groups)))
        return [Checked(baseline=base, candidate=g, result=check_sets([of(x) for x in groups[base]], [of(x) for x in labels]), groups=True) for g, labels in groups.items() if g != base]
    return [Checked(baseline=baseline, candidate=label, result=check_sets([of(baseline)], [of(label)]), groups=False) for label in docs if label != baseline]


def comparison_markdown(sentences: Sequence[str], checked: Sequence[Checked], ids: Mapping[str, str], mismatch: str | None) -> str:
    """The verdict sentences, the like-for-like banner, then `tpu-perf check`'s table per candidate."""
    runs = ", ".join(f"{md(label)} ({md(run_id)})" for label, run_id in ids.items())
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
