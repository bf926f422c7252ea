"""Terminal rendering of the `aot` section: the step compiled for TPU slices (`record --topology`)."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from tpu_perf.views import format as fmt
from tpu_perf.views.format import PlainTable as Table


def aot_entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The `aot` value as a list (it is one object for one slice, a list for several, or null)."""
    aot = doc.get("aot")
    return [] if not aot else [aot] if isinstance(aot, dict) else list(aot)


def _roofline(a: dict[str, Any]) -> str:
    if a["optimal_step_s"] is None:
        return f"n/a ({a['optimal_step_reason']})"
    mfu = fmt.percent(a["roofline_mfu"]) if a["roofline_mfu"] is not None else f"n/a ({a['roofline_reason']})"
    model = f", model {fmt.percent(a['model_roofline_mfu'])}" if a.get("model_roofline_mfu") is not None else ""
    return f"{fmt.seconds(a['optimal_step_s'])}, MFU {mfu}{model}"


def _hbm(a: dict[str, Any]) -> str:
    fits = {True: "fits", False: "does NOT fit", None: "fit unknown"}[a["fits"]]
    return f"{fmt.bytes_(a['peak_hbm_bytes'])} of {fmt.bytes_(a['hbm_capacity_bytes'])} ({fits})"


def _collectives(a: dict[str, Any]) -> str:
    return ", ".join(f"{k} x{v['count']} {fmt.bytes_(v['bytes'])}" for k, v in a["collectives"].items()) or "none"


def render_aot(doc: dict[str, Any]) -> RenderableType | None:
    entries = aot_entries(doc)
    if not entries:
        return None
    table = Table(title="TPU compile (record --topology): compiler estimates, not measurements", title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for a in entries:
        fusions = ", ".join(f"{k} {v}" for k, v in a["fusions"].items()) or "none"
        table.add_row(a["topology"], f"{a['chips']} x {a['chip']} ({a['devices']} devices), step function {a['function']}")
        table.add_row("  FLOPs / step", f"{fmt.flops(a['flops_per_step'])} ({fmt.flops(a['flops_per_device_step'])} per device), {fmt.bytes_(a['bytes_accessed'])} accessed per device")
        table.add_row("  roofline step", _roofline(a))
        table.add_row("  peak HBM", f"{_hbm(a)} per device")
        table.add_row("  fusions", fusions)
        table.add_row("  collectives", f"{_collectives(a)} (per device)")
    return table
