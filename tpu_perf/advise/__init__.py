"""The advisor: rules that read a run's signals and say what to change, with evidence and the gain to expect.

Imports analyzers, never the other way round; the CLI and views compose the two.
"""

from __future__ import annotations

from tpu_perf.advise.finding import Evidence, Finding, Fix, Gain
from tpu_perf.advise.rules import RULES, Advice, advise_signals
from tpu_perf.advise.signals import Signals, build_signals
from tpu_perf.analyzers.report import Report
from tpu_perf.store import Run


def advise(run: Run, report: Report | None = None, *, target: str | None = None) -> Advice:
    """Every rule's finding for `run`, ranked. `report`: its typed report, when the caller has one."""
    return advise_signals(build_signals(run, report, target=target))


__all__ = ["RULES", "Advice", "Evidence", "Finding", "Fix", "Gain", "Signals", "advise", "build_signals"]
