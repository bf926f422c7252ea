"""The step-time breakdown of several runs side by side: seconds per step in each part, its share
of the step, and the change against a baseline run.

From the report's `breakdown_detail.steps` (one row per traced step and device lane, seconds per
part; the parts sum to the step), so a part reads "2.1 ms of a 9.8 ms step", not only "21 %":
two runs with the same shares can differ in every part's time. Where a report has the shares
(`breakdown`) but no per-step rows, the seconds are unknown (None) and only the share is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from tpu_perf.analyzers.breakdown import PARTS
from tpu_perf.analyzers.compare import delta, dig


def _fractions(doc: Mapping[str, Any]) -> dict[str, float]:
    raw = doc.get("breakdown")
    if isinstance(raw, dict) and isinstance(raw.get("fractions"), dict):
        raw = raw["fractions"]
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def per_step_parts(doc: Mapping[str, Any]) -> dict[str, float | None] | None:
    """Mean seconds per traced step (and device lane) in each part; None when the run has no breakdown."""
    rows = dig(doc, "breakdown_detail.steps")
    fractions = _fractions(doc)
    if not fractions:
        return None
    if not isinstance(rows, list) or not rows:
        return dict.fromkeys(fractions)
    frame = pd.DataFrame([r for r in rows if isinstance(r, dict)])
    return {part: float(pd.to_numeric(frame[part], errors="coerce").mean()) if part in frame else None for part in fractions}


def breakdown_side_by_side(docs: Mapping[str, Mapping[str, Any]], baseline: str) -> pd.DataFrame:
    """One row per part (in `PARTS` order, parts no run has left out), per run: `LABEL s` seconds
    per step, `LABEL %` share of the step, and `Δ LABEL` the change of the seconds against the
    baseline (None against an unknown value). Empty when no run has a breakdown."""
    parts = {label: per_step_parts(doc) for label, doc in docs.items()}
    shares = {label: _fractions(doc) for label, doc in docs.items()}
    have = [label for label, p in parts.items() if p is not None]
    if not have:
        return pd.DataFrame()
    present = [p for p in PARTS if any(shares[label].get(p) for label in have)]
    present += sorted({p for label in have for p in shares[label] if p not in PARTS and shares[label][p]})
    table: dict[str, list[Any]] = {}
    for label in have:
        seconds = [parts[label].get(p) for p in present]  # type: ignore[union-attr]
        table[f"{label} s"] = seconds
        table[f"{label} %"] = [shares[label].get(p) for p in present]
        if label != baseline and baseline in have:
            base = [parts[baseline].get(p) for p in present]  # type: ignore[union-attr]
            table[f"Δ {label}"] = [delta(v, b) for v, b in zip(seconds, base, strict=True)]
    return pd.DataFrame(table, index=pd.Index([p.replace("_", " ") for p in present], name="part"))
