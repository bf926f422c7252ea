"""The report's trace parts: the trace folder, top ops, the step-time breakdown, devices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpu_perf.analyzers.breakdown import analyze_breakdown
from tpu_perf.analyzers.layout import Layout, reshaped
from tpu_perf.analyzers.op_classes import reclassify, run_op_classes
from tpu_perf.analyzers.steps import StepStats
from tpu_perf.store import Run

TOP_OPS = 20


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
    top["op_class"] = reclassify(run_op_classes(run), top["name"], top["op_class"].astype(object))
    if top["fusion_kind"].isna().any():
        kinds = hlo_fusion_kinds(run)
        known = top["fusion_kind"].astype(object)
        top["fusion_kind"] = known.where(known.notna(), top["name"].map(kinds).astype(object))
    return top.to_dict("records")  # NaN (unknown) stays NaN here; Report.to_dict() makes it null


@dataclass(frozen=True, kw_only=True)
class TraceFiles:
    """The run's trace folder (opens in XProf/TensorBoard/Perfetto), None when it has no trace."""

    files: list[str]
    logdir: str | None


def analyze_trace_files(run: Run) -> TraceFiles:
    files = run.list_files("trace")
    return TraceFiles(files=files, logdir=run.file_path("trace") if files else None)


@dataclass(frozen=True, kw_only=True)
class TraceSection:
    """What the trace window's tables say: top ops, the step-time breakdown, devices, device steps."""

    op_count: int
    op_time_s: float | None
    op_steps: float | None
    """Steps whose device work the ops' totals hold (`Breakdown.trace_steps`); None: unknown."""
    top: list[dict[str, Any]]
    breakdown: dict[str, float]
    breakdown_window: str
    breakdown_steps: list[dict[str, Any]]
    breakdown_alignment_error_s: float | None
    breakdown_steps_from: str | None
    breakdown_device_check: dict[str, float | None] | None
    breakdown_annotations_agree: bool | None
    breakdown_window_steps: int = 0
    """`steps` windows: the traced steps they frame (the shares' sample)."""
    breakdown_window_median_s: float | None = None
    """`steps` windows: the median traced step's window (each step's lanes averaged)."""
    breakdown_note: str | None = None
    """What the breakdown stands on, when its traced steps ran unlike the run's step time."""
    breakdown_long_host_share: float | None = None
    """`steps` windows: the median over the windows whose `long_host_s` is known of its share of the
    window (host stretches of 1 ms or more; None where no window's is known)."""
    breakdown_core_wait_share: float | None = None
    """`steps` windows: the median share of a window its step's thread waited for a CPU core (other
    processes or threads had it): time in the window's gaps and ops that nobody in this process ran;
    None where the recorder could not read it."""
    devices: list[dict[str, Any]]
    device_step_count: int
    device_step_median_s: float | None
    device_step_source: str | None

    def to_dict(self) -> dict[str, Any]:
        """The report's published keys: `ops`, `breakdown`, `breakdown_detail`, `devices`, `device_steps` (`TRACE_LAYOUT`)."""
        return reshaped(self, TRACE_LAYOUT)


TRACE_LAYOUT: Layout = {
    "ops": {"count": "op_count", "total_time_s": "op_time_s", "steps": "op_steps", "top": "top"},
    "breakdown": "breakdown",
    "breakdown_detail": {
        "window": "breakdown_window", "steps_from": "breakdown_steps_from", "steps": "breakdown_steps",
        "alignment_error_s": "breakdown_alignment_error_s", "annotations_agree": "breakdown_annotations_agree",
        "device_check": "breakdown_device_check", "window_steps": "breakdown_window_steps",
        "window_median_s": "breakdown_window_median_s", "note": "breakdown_note", "long_host_share": "breakdown_long_host_share",
        "core_wait_share": "breakdown_core_wait_share",
    },
    "devices": "devices",
    "device_steps": {"count": "device_step_count", "median_s": "device_step_median_s", "source": "device_step_source"},
}
"""`TraceSection`'s keys in the report (top level): what `to_dict` writes and the schema describes."""


UNLIKE = 1.25
"""Traced steps whose median window is more than this many times the run's step time (or less than
its inverse) ran unlike the others: the breakdown's shares are theirs, and the report says so."""


def _window_note(windows: int, median_s: float | None, step_s: float | None) -> str | None:
    """A line when the traced steps the shares stand on ran unlike the run's step: profiling's own
    cost (a Python-heavy step pays the profiler's per-call hooks), or steps still warming up."""
    if median_s is None or not step_s:
        return None
    ratio = median_s / step_s
    if 1 / UNLIKE <= ratio <= UNLIKE:
        return None
    why = "profiling's own cost, or steps still warming up" if ratio > 1 else "the steps around them held more of the run's other work"
    return (f"the {windows} traced steps ran {ratio:.2f}x the run's step time ({median_s * 1e3:.3g} ms against {step_s * 1e3:.3g} ms at the median: "
            f"{why}); the shares are of those steps")


CORE_WAIT_NOTE = 0.05
"""tpu-perf: traced steps whose thread waited for a core this share of the step or more get a note:
their gaps and op times hold time nobody on this process ran (a shared or busy machine)."""


def _long_host_share(per_step: pd.DataFrame) -> float | None:
    known = per_step.dropna(subset=["long_host_s"]) if not per_step.empty else per_step
    if known.empty:
        return None
    shares = known["long_host_s"].astype(float) / known["step_s"].astype(float)
    return float(shares.median())


def _core_wait_share(per_step: pd.DataFrame) -> float | None:
    if per_step.empty or "core_wait_s" not in per_step:
        return None
    windows = per_step.groupby("step")[["core_wait_s", "step_s"]].mean().dropna()
    return float((windows["core_wait_s"] / windows["step_s"]).clip(upper=1.0).median()) if not windows.empty else None


def _core_wait_note(share: float | None) -> str | None:
    if share is None or share < CORE_WAIT_NOTE:
        return None
    return (f"the loop's thread waited for a CPU core {share:.0%} of the traced steps (other processes or threads had it): "
            f"the steps' times include that wait, and so do the breakdown's parts (a gap or an op the thread could not run)")


def analyze_trace_tables(run: Run, steps_stats: StepStats | None = None) -> TraceSection:
    """The trace's tables; `steps_stats` (the report's steps) lets the breakdown say when its traced
    steps ran unlike the run's step time."""
    ops = run.table("ops")
    bd = analyze_breakdown(run)
    window_median = float(bd.per_step.groupby("step")["step_s"].mean().median()) if not bd.per_step.empty else None
    windows = int(bd.per_step["step"].nunique()) if not bd.per_step.empty else 0
    core_wait = _core_wait_share(bd.per_step)
    devices = run.table("devices")
    steps = run.table("device_steps")
    device_keys = ("id", "kind", "chip", "peak_tflops", "peak_hbm_gbps", "source")
    return TraceSection(
        op_count=int(len(ops)),
        op_time_s=float(ops["total_time_s"].sum()) if not ops.empty else None,
        op_steps=bd.trace_steps,
        top=top_ops(run),
        breakdown=dict(bd.fractions),
        breakdown_window=bd.window,
        breakdown_steps=bd.per_step.to_dict("records")[:200],
        breakdown_alignment_error_s=bd.alignment_error_s,
        breakdown_steps_from=bd.steps_from,
        breakdown_device_check=bd.device_check,
        breakdown_annotations_agree=bd.annotations_agree,
        breakdown_window_steps=windows,
        breakdown_window_median_s=window_median,
        breakdown_note="; ".join(n for n in (_window_note(windows, window_median, steps_stats.step_s if steps_stats is not None else None), _core_wait_note(core_wait)) if n) or None,
        breakdown_long_host_share=_long_host_share(bd.per_step),
        breakdown_core_wait_share=core_wait,
        devices=[{k: r.get(k) for k in device_keys} for r in (devices.to_dict("records") if not devices.empty else [])],
        device_step_count=int(len(steps)),
        device_step_median_s=float(pd.to_numeric(steps["duration_s"]).median()) if not steps.empty else None,
        device_step_source=str(steps["source"].iloc[0]) if not steps.empty else None,
    )
