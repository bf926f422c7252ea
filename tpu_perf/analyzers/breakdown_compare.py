"""The step-time breakdown of several runs side by side: seconds per step in each part, its share
of the step, and the change against a baseline run.

From the report's `breakdown_detail.steps` (one row per traced step and device lane, seconds per
part; the parts sum to the step), so a part reads "2.1 ms of a 9.8 ms step", not only "21 %":
two runs with the same shares can differ in every part's time. A report with shares (`breakdown`)
but no per-step rows (`breakdown_detail.window` "trace": an import whose trace marks no steps, or
a run whose steps' windows do not frame the device's work) has shares of the whole trace only: it
gets no seconds-per-step column and no change against the baseline, not a column of unknowns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from tpu_perf.analyzers.breakdown import PARTS
from tpu_perf.analyzers.compare import delta, dig


def fractions(doc: Mapping[str, Any]) -> dict[str, float]:
    """The report's `breakdown` as {part: share}, accepting a flat dict or one under `fractions`; {} without one."""
    raw = doc.get("breakdown")
    if isinstance(raw, dict) and isinstance(raw.get("fractions"), dict):
        raw = raw["fractions"]
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = dig(doc, "breakdown_detail.steps")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def whole_trace_only(doc: Mapping[str, Any]) -> bool:
    """The run has breakdown shares but nothing per step: they are shares of the whole trace."""
    return bool(fractions(doc)) and not _rows(doc)


def whole_trace_reason(doc: Mapping[str, Any]) -> str:
    """Why a run's breakdown is of the whole trace, in words."""
    if dig(doc, "run.imported"):
        return "an import whose trace marks no steps"
    check = dig(doc, "breakdown_detail.device_check")
    if check and dig(doc, "steps.runs_ahead"):
        return "the host queued its traced steps ahead of the device, so no step's window frames the device's work"
    if check:  # a loop that waits on every step: the recorder's device time and the trace's disagree
        return "the trace's device work per step is far shorter than the recorder's device time per step, so its steps could not be placed on the trace"
    return "neither the recorder's steps nor step marks of its own could be placed on its trace"


def per_step_parts(doc: Mapping[str, Any]) -> dict[str, float | None] | None:
    """Mean seconds per traced step (and device lane) in each part; None when the run has no
    per-step breakdown (none at all, or shares of the whole trace only)."""
    shares, rows = fractions(doc), _rows(doc)
    if not shares or not rows:
        return None
    frame = pd.DataFrame(rows)
    return {part: float(pd.to_numeric(frame[part], errors="coerce").mean()) if part in frame else None for part in shares}


def breakdown_side_by_side(docs: Mapping[str, Mapping[str, Any]], baseline: str) -> pd.DataFrame:
    """One row per part (in `PARTS` order, parts no run has left out), per run with a breakdown:
    `LABEL %` its share (of the step, or of the whole trace: `whole_trace_only`); per run with
    per-step rows also `LABEL s` seconds per step and, when the baseline has them too, `Δ LABEL`
    the change of the seconds against it (None against zero). Empty when no run has a breakdown."""
    shares = {label: fractions(doc) for label, doc in docs.items()}
    have = [label for label in docs if shares[label]]
    if not have:
        return pd.DataFrame()
    parts = {label: per_step_parts(docs[label]) for label in have}
    present = [p for p in PARTS if any(shares[label].get(p) for label in have)]
    present += sorted({p for label in have for p in shares[label] if p not in PARTS and shares[label][p]})
    table: dict[str, list[Any]] = {}
    base = parts.get(baseline)
    for label in have:
        seconds = parts[label]
        if seconds is not None:
            table[f"{label} s"] = [seconds.get(p) for p in present]
        table[f"{label} %"] = [shares[label].get(p) for p in present]
        if seconds is not None and base is not None and label != baseline:
            table[f"Δ {label}"] = [delta(seconds.get(p), base.get(p)) for p in present]
    return pd.DataFrame(table, index=pd.Index([p.replace("_", " ") for p in present], name="part"))
