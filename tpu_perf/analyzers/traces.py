"""Report sections from the trace tables: top ops, the step-time breakdown, devices."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpu_perf.analyzers.breakdown import analyze_breakdown
from tpu_perf.analyzers.report import section
from tpu_perf.store import Run

TOP_OPS = 20


def _value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v.item() if hasattr(v, "item") else v


def hlo_fusion_kinds(run: Run) -> dict[str, str]:
    """Fusion kind by instruction name, from the optimized HLO the run saved (recorded runs).

    A trace names ops after HLO instructions; on CPU and GPU the trace does not carry the fusion
    kind, but the HLO does (`%multiply_tanh_fusion = ... fusion(...), kind=kLoop`).
    """
    from tpu_perf.analyzers.hlo import run_hlo

    programs = run.programs
    if programs.empty or "hlo_file" not in programs:
        return {}
    kinds: dict[str, str] = {}
    for relpath in programs["hlo_file"].dropna():
        if run.exists(relpath):
            module = run_hlo(run, relpath)
            kinds.update({i.name: i.fusion_kind for i in module.instructions() if i.fusion_kind})
    return kinds


def top_ops(run: Run, n: int = TOP_OPS) -> list[dict[str, Any]]:
    """The `n` ops with the most device time, per device (a row per device and op)."""
    ops = run.table("ops")
    if ops.empty:
        return []
    keep = ["name", "category", "fusion_kind", "occurrences", "total_time_s", "self_time_s", "flops", "bytes_accessed", "arithmetic_intensity", "bound", "op_class", "device", "program"]
    top = ops.sort_values("total_time_s", ascending=False).head(n).reindex(columns=keep)
    if top["fusion_kind"].isna().any():
        kinds = hlo_fusion_kinds(run)
        known = top["fusion_kind"].astype(object)
        top["fusion_kind"] = known.where(known.notna(), top["name"].map(kinds).astype(object))
    return [{k: _value(v) for k, v in row.items()} for row in top.to_dict("records")]


@section
def _trace_tables(run: Run, doc: dict[str, Any]) -> None:
    ops = run.table("ops")
    doc["ops"] = {"count": int(len(ops)), "total_time_s": float(ops["total_time_s"].sum()) if not ops.empty else None, "top": top_ops(run)}
    bd = analyze_breakdown(run)
    per_step = bd.per_step
    doc["breakdown"] = dict(bd.fractions)
    doc["breakdown_detail"] = {
        "window": bd.window,
        "steps": [{k: _value(v) for k, v in r.items()} for r in per_step.to_dict("records")][:200],
    }
    devices = run.table("devices")
    doc["devices"] = [
        {"id": _value(r.get("id")), "kind": _value(r.get("kind")), "chip": _value(r.get("chip")), "peak_tflops": _value(r.get("peak_tflops")), "peak_hbm_gbps": _value(r.get("peak_hbm_gbps")), "source": _value(r.get("source"))}
        for r in (devices.to_dict("records") if not devices.empty else [])
    ]
    steps = run.table("device_steps")
    doc["device_steps"] = {
        "count": int(len(steps)),
        "median_s": float(pd.to_numeric(steps["duration_s"]).median()) if not steps.empty else None,
        "source": _value(steps["source"].iloc[0]) if not steps.empty else None,
    }


@section
def _hlo_analysis(run: Run, doc: dict[str, Any]) -> None:
    """Dots/dtypes/padding, collectives, loops and unfused elementwise work of the step program."""
    from tpu_perf.analyzers.hlo import run_hlo
    from tpu_perf.analyzers.hlo_analysis import analyze_hlo, tile_for_chip

    programs = (doc.get("hlo") or {}).get("programs") or []
    step = next((p for p in programs if p["is_step"]), programs[0] if programs else None)
    if step is None or not run.exists(step["hlo_file"]):
        doc.setdefault("hlo", {})["analysis"] = None
        return
    chip = (doc.get("flops") or {}).get("chip")
    a = analyze_hlo(run_hlo(run, step["hlo_file"]), tile=tile_for_chip(chip))
    doc["hlo"]["analysis"] = {
        "function": step["function"], "dots": len(a.dots), "dot_flops_by_dtype": a.dot_flops_by_dtype, "dot_flops_share_by_dtype": a.dot_flops_share_by_dtype,
        "padding_waste": a.padding_waste, "tile": a.tile, "collectives": a.collectives, "async_pairs": a.async_pairs, "async_overlapped": a.async_overlapped,
        "while_loops": a.while_loops, "unfused_elementwise": a.unfused_elementwise, "unfused_elementwise_bytes": a.unfused_elementwise_bytes,
    }
