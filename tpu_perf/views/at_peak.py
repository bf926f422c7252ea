"""Renders `memory.at_peak` (and `aot.at_peak`, `memory.out_of_memory`) for a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tpu_perf.analyzers.at_peak_compare import CategoryShift
from tpu_perf.views import format as fmt
from tpu_perf.views.aot import aot_entries

TOP_ROWS = 10


def _short(source: str | None) -> str:
    """`file.py:12` for a file:line source (the JSON keeps the full path), else the pytree path."""
    if not source:
        return ""
    return source.rsplit("/", 1)[-1] if source.startswith("/") else source


def shift_sentence(shift: CategoryShift) -> str:
    """One sentence on a change of memory at the peak: whether the peak moved, or only bytes
    moved between categories (remat turning saved activations into recomputed ones)."""
    moves = ", ".join(f"{k.replace('_', ' ')} {'+' if v > 0 else '-'}{fmt.bytes_(abs(v))}" for k, v in sorted(shift.changes.items(), key=lambda kv: kv[1]))
    spaces = "; " + ", ".join(f"{k} {'+' if v > 0 else '-'}{fmt.bytes_(abs(v))}" for k, v in shift.spaces_change_bytes.items()) + " (other memory spaces, not in the peak)" if shift.spaces_change_bytes else ""
    change = f"{'+' if shift.peak_change_bytes >= 0 else '-'}{fmt.bytes_(abs(shift.peak_change_bytes))}"
    if shift.only_moved:
        return f"The peak did not move ({change}): {fmt.bytes_(shift.moved_bytes)} moved between categories ({moves}){spaces}"
    if not shift.peak_moved:
        return f"The peak did not move ({change}{', ' + moves if moves else ''}){spaces}"
    return f"The peak moved {change} ({moves or 'no category changed'}){spaces}"


def spaces_lines(at_peak: dict[str, Any]) -> list[str]:
    """One line per other memory space (TPU VMEM, SMEM): its bytes, apart from the peak, by category."""
    out = []
    for space, size in (at_peak.get("memory_spaces") or {}).items():
        inside = ", ".join(f"{k.replace('_', ' ')} {fmt.bytes_(v)}" for k, v in ((at_peak.get("space_categories") or {}).get(space) or {}).items() if v)
        out.append(f"{space} (apart from the peak): {fmt.bytes_(size)}" + (f" ({inside})" if inside else ""))
    return out


def at_peak_table(at_peak: dict[str, Any], title: str) -> RenderableType:
    """The categories on one line, the findings, and the largest buffers live at the peak."""
    peak = at_peak["peak_bytes"]
    shares = ", ".join(f"{k.replace('_', ' ')} {fmt.bytes_(v)} ({fmt.percent(v / peak) if peak else 'n/a'})" for k, v in at_peak["categories"].items() if v)
    parts: list[RenderableType] = [Text(f"{title}: {fmt.bytes_(peak)} at the peak of {at_peak['program']} ({at_peak['source']})", style="bold"), Text(f"  {shares}")]
    parts += [Text(f"  - {finding}") for finding in at_peak["findings"]]
    parts += [Text(f"  {line}") for line in spaces_lines(at_peak)]
    table = Table(box=None, pad_edge=False)
    for col in ("bytes", "category", "shape", "op", "source"):
        table.add_column(col)
    for b in at_peak["top_buffers"][:TOP_ROWS]:
        table.add_row(fmt.bytes_(b["bytes"]), b["category"], b["shape"], b["op"], _short(b["source"]))
    parts.append(table)
    return Group(*parts)


def render_at_peak(doc: dict[str, Any]) -> RenderableType | None:
    """What filled device memory at the step's peak (and why the run died, when it ran out)."""
    memory = doc.get("memory") or {}
    parts: list[RenderableType] = []
    oom = memory.get("out_of_memory")
    if oom:
        failed = f", the failed allocation was {fmt.bytes_(oom['failed_allocation_bytes'])}" if oom.get("failed_allocation_bytes") is not None else ""
        parts.append(Text(f"The script ran out of device memory in {oom['function'] or 'an unknown program'}{failed}: {oom['message']}", style="red"))
    if memory.get("at_peak"):
        parts.append(at_peak_table(memory["at_peak"], "Memory at the peak"))
    for aot in aot_entries(doc):
        if aot.get("at_peak"):
            fits = {True: "fits", False: "does NOT fit", None: "fit unknown"}[aot["fits"]]
            headroom = f", headroom {fmt.bytes_(aot['at_peak_headroom_bytes'])} of {fmt.bytes_(aot['hbm_capacity_bytes'])} per device" if aot.get("at_peak_headroom_bytes") is not None else ""
            parts.append(at_peak_table(aot["at_peak"], f"Memory at the peak on {aot['topology']} ({fits}{headroom})"))
    return Group(*parts) if parts else None
