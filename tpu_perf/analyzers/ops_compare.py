"""Top ops of several runs side by side, matched by what they are, per step and per device.

Why not by name: HLO instruction names ("fusion.12", "ynn_fusion.2") are numbered by the compiler
per program, so across two programs the same name is a different op ("ynn_fusion.2 Δ +105,825 %").
Across programs ops are matched by their class and fusion kind (or trace category); names are
matched only when both runs ran the same step program. Times are per step and per device (the
report's top ops are summed over the trace window's steps and listed per device), so a 4-chip
run does not look 4x slower than a 1-chip run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from tpu_perf.analyzers.compare import dig

NAME_WIDTH = 48
"""Characters of an op name shown before it is shortened (the full name is kept beside it)."""


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """`name` cut in the middle to `width` characters: CUDA kernel names differ at both ends."""
    if len(name) <= width:
        return name
    keep = width - 1
    return f"{name[: keep - keep // 3]}…{name[-(keep // 3):]}"


def _meaning(row: Mapping[str, Any]) -> str:
    kind = row.get("fusion_kind") or row.get("category") or "op"
    op_class = row.get("op_class") or "other"
    return f"{op_class} · {kind}"


def _window_steps(doc: Mapping[str, Any]) -> float | None:
    """Steps whose device work the trace holds: those the breakdown counted in it (`ops.steps`: the
    trace stays open while queued steps run), else the traced steps of a recording, all steps of an import."""
    held = dig(doc, "ops.steps")
    if held:
        return float(held)
    traced = dig(doc, "steps.traced")
    if traced:
        return int(traced)
    if dig(doc, "run.imported") and dig(doc, "steps.count"):
        return int(dig(doc, "steps.count"))
    return None


def per_step(doc: Mapping[str, Any], *, by_name: bool, whole_trace: bool = False) -> pd.DataFrame:
    """One row per matched op: seconds per step per device (None when the window's steps are
    unknown; with `whole_trace`, per device over the whole trace instead) and its op names."""
    top = dig(doc, "ops.top")
    rows = [o for o in top if isinstance(o, dict) and o.get("name") is not None and o.get("total_time_s") is not None] if isinstance(top, list) else []
    if not rows:
        return pd.DataFrame(columns=["time_s", "ops"])
    ops = pd.DataFrame(rows)
    devices = int(ops["device"].nunique()) if "device" in ops and ops["device"].notna().any() else 1
    steps = _window_steps(doc)
    ops["key"] = ops["name"].astype(str) if by_name else [_meaning(r) for r in rows]
    grouped = ops.groupby("key", sort=False)
    out = pd.DataFrame({"total_s": grouped["total_time_s"].sum(), "ops": grouped["name"].agg(lambda n: ", ".join(dict.fromkeys(map(str, n))))})
    if by_name:  # what each named op is, and whether it is compute- or memory-bound where known
        out["what"] = pd.Series([_meaning(r) for r in rows], index=ops.index).groupby(ops["key"], sort=False).first()
        out["bound"] = grouped["bound"].first() if "bound" in ops else None
    if whole_trace:
        out["time_s"] = out["total_s"] / devices
    else:
        out["time_s"] = out["total_s"] / (steps * devices) if steps else None
    return out.sort_values("total_s", ascending=False)


def has_steps(doc: Mapping[str, Any]) -> bool:
    """Whether the trace window's steps are known (an import of a trace without step markers has none)."""
    return _window_steps(doc) is not None


def ops_side_by_side(docs: Mapping[str, Mapping[str, Any]], baseline: str, *, same_program: bool = False, whole_trace: bool = False, limit: int = 15) -> pd.DataFrame:
    """Per run: time per step per device (`LABEL`, seconds), its share of the step time (`steps.step_s`)
    (`LABEL % of step`), and the change against the baseline (`Δ LABEL`); `ops` lists the names
    (and by name, `what` each op is and its `bound`).

    Matched by meaning unless `same_program` (then by HLO name). Unknown stays unknown (NaN). Per
    step (not `whole_trace`), a run without steps (`has_steps`) has no column: its times are not per step."""
    frames = {label: per_step(doc, by_name=same_program, whole_trace=whole_trace) for label, doc in docs.items() if whole_trace or has_steps(doc)}
    frames = {label: f for label, f in frames.items() if not f.empty}
    if not frames:
        return pd.DataFrame()
    times = pd.DataFrame({label: pd.to_numeric(f["time_s"], errors="coerce") for label, f in frames.items()})
    totals = pd.DataFrame({label: f["total_s"] for label, f in frames.items()})
    order = totals.max(axis=1).sort_values(ascending=False).index[:limit]
    out = pd.DataFrame(index=order)
    names = pd.concat([f["ops"] for f in frames.values()]).groupby(level=0).agg(lambda n: ", ".join(dict.fromkeys(", ".join(n).split(", "))))
    for label in times.columns:
        out[label] = times.loc[order, label]
        step = dig(docs[label], "steps.step_s")
        out[f"{label} % of step"] = out[label] / step if step and not whole_trace else float("nan")
    if baseline in times:
        for label in times.columns:
            if label != baseline:
                out[f"Δ {label}"] = (out[label] - out[baseline]) / out[baseline]
    if same_program:
        for column in ("what", "bound"):
            out.insert(0, column, pd.concat([f[column] for f in frames.values()]).groupby(level=0).first().reindex(order))
    out["ops"] = names.reindex(order)
    out.index.name = "op"
    return out
