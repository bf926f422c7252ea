"""Terminal rendering of `compile.torch`: graph breaks and recompiles with their reasons."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from tpu_perf.analyzers.torch_compile import guard_words
from tpu_perf.views.format import PlainTable as Table

MAX_ROWS = 8
"""Reasons listed in the terminal; `report --json` carries them all."""


def render_torch_compile(doc: dict[str, Any]) -> RenderableType | None:
    t = (doc.get("compile") or {}).get("torch")
    if not t or not (t["graph_breaks"] or t["recompiles"] or t["unique_graphs"] or t["tpu_compile_cache"]):
        return None
    table = Table(title=f"torch.compile: {t['unique_graphs']} graphs, {t['graph_breaks']} graph breaks, {t['recompiles']} recompiles, {t['compile_time_s']:.2f} s compiling", title_justify="left")
    table.add_column("kind")
    table.add_column("where")
    table.add_column("reason")
    for b in t["graph_break_reasons"][:MAX_ROWS]:
        table.add_row(f"graph break x{b['count']}", "", b["reason"])
    for r in t["recompile_reasons"][:MAX_ROWS]:
        table.add_row("recompile", f"{r['function']} ({r['compile_id']})", guard_words(r["reason"]))
    cache = t.get("tpu_compile_cache")
    if cache:
        table.add_row("torch-tpu cache", "", ", ".join(f"{k} {v}" for k, v in cache.items()))
    return table
