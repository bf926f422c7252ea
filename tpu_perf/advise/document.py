"""The advisor's JSON document (`tpu-perf advise --json`) and the report's `advice` key."""

from __future__ import annotations

from typing import Any

from tpu_perf.advise.rules import Advice
from tpu_perf.analyzers.report import Report
from tpu_perf.jsonio import to_jsonable
from tpu_perf.store import Run

ADVICE_VERSION = 2
"""2: `expected_gain` has `kind` (estimate / upper_bound / none), `benefit` and, for compile time or
memory, `amount` and `unit`; the document has `next`, `nothing_left`, `also` and `conclusion`."""
REPORT_TOP = 3
"""Fired findings the report shows."""


def advice_document(run: Run, advice: Advice) -> dict[str, Any]:
    """Every rule with its outcome, ranked (fired step-time findings by expected gain first)."""
    nxt = advice.next_fix
    return {
        "advice_version": ADVICE_VERSION,
        "run": {"id": run.id, "name": run.name},
        "target": advice.target,
        "target_from": advice.target_from,
        "next": nxt.id if nxt is not None else None,
        "nothing_left": advice.nothing_left,
        "also": [f.id for f in advice.also],
        "conclusion": advice.conclusion(),
        "findings": to_jsonable(advice.findings),
    }


def report_advice(run: Run, report: Report) -> dict[str, Any]:
    """The report's `advice` key (the run's own chip, no target): the top fired step-time findings,
    the "also" list and the conclusion."""
    from tpu_perf.advise import advise

    advice = advise(run, report)
    return {"top": to_jsonable(advice.step_time[:REPORT_TOP]), "also": to_jsonable(advice.also), "conclusion": advice.conclusion(), "nothing_left": advice.nothing_left}
