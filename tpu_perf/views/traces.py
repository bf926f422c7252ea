"""Terminal rendering of the trace sections: top ops with fusion kind and boundness, the breakdown."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType

from tpu_perf.views import format as fmt
from tpu_perf.views.format import PlainTable as Table

SHOWN_OPS = 10


def render_trace_tables(doc: dict[str, Any]) -> RenderableType | None:
    ops = (doc.get("ops") or {}).get("top") or []
    parts: list[RenderableType] = []
    if ops:
        held = (doc.get("ops") or {}).get("steps")
        title = f"Top ops by device time (the whole trace: {held:.3g} steps' device work)" if held else "Top ops by device time (the whole trace)"
        table = Table(title=title, title_justify="left")
        for col in ("op", "device", "fusion kind", "count", "time", "FLOPs", "bound"):
            table.add_column(col, overflow="fold")
        for o in ops[:SHOWN_OPS]:
            table.add_row(
                str(o["name"])[:40], str(o["device"]), str(o["fusion_kind"] or "-"), str(o["occurrences"]),
                fmt.seconds(o["total_time_s"]), fmt.flops(o["flops"]), str(o["bound"] or "n/a"),
            )
        parts.append(table)
    bd = doc.get("breakdown") or {}
    if bd:
        detail = doc.get("breakdown_detail") or {}
        table = Table(title=f"Step-time breakdown ({_breakdown_sample(detail)})", title_justify="left")
        for part in bd:
            table.add_column(part.replace("_", " "))
        table.add_row(*[fmt.percent(v) for v in bd.values()])
        parts.append(table)
        if detail.get("note"):
            from rich.text import Text

            parts.append(Text(detail["note"], style="yellow"))
    devices = doc.get("devices") or []
    if devices:
        parts.append(_devices_line(devices))
    return Group(*parts) if parts else None


def _breakdown_sample(detail: dict[str, Any]) -> str:
    """What the shares stand on: the traced steps (and their median window), or the whole trace."""
    if detail.get("window") == "steps":
        windows = detail.get("window_steps") or 0
        median = detail.get("window_median_s")
        return f"{windows} traced steps" + (f", median {fmt.seconds(median)}" if median is not None else "")
    if detail.get("window") == "trace":
        return "the whole trace: shares only, it marks no steps"
    return str(detail.get("window") or "n/a")


def _devices_line(devices: list[dict[str, Any]]) -> RenderableType:
    from rich.text import Text

    d = devices[0]
    peak = f"{fmt.number(d['peak_tflops'], 4)} TFLOP/s, {fmt.number(d['peak_hbm_gbps'], 5)} GB/s HBM" if d.get("peak_tflops") else "peaks unknown"
    return Text(f"trace devices: {len(devices)} x {d['kind']} ({d.get('chip') or 'unknown chip'}; {peak}; from {d.get('source') or 'n/a'})", style="dim")
