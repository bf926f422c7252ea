"""The advisor's JSON document (`tpu-perf advise --json`) and the report's `advice` key."""

from __future__ import annotations

from typing import Any

from tpu_perf.advise.rules import Advice
from tpu_perf.jsonio import to_jsonable
from tpu_perf.store import Run

ADVICE_VERSION = 1
REPORT_TOP = 3
"""Fired findings the report shows."""


def advice_document(run: Run, advice: Advice) -> dict[str, Any]:
    """Every rule with its outcome, ranked (fired by expected gain first)."""
    return {
        "advice_version": ADVICE_VERSION,
        "run": {"id": run.id, "name": run.name},
        "target": advice.target,
        "target_from": advice.target_from,
        "findings": to_jsonable(advice.findings),
    }


def report_advice(run: Run, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The top fired findings for the report's `advice` key (the run's own chip, no target)."""
    from tpu_perf.advise import advise

    return to_jsonable(advise(run, doc).fired[:REPORT_TOP])
