"""The hosts table of a multi-process job's report: one row per process, stragglers named."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from tpu_perf.views import format as fmt
from tpu_perf.views.format import PlainTable as Table


def render_hosts(doc: dict[str, Any]) -> RenderableType | None:
    hosts = doc.get("hosts")
    if not hosts:
        return None
    job = doc.get("job") or {}
    slow = {s["process_index"] for s in doc.get("stragglers") or []}
    table = Table(title=f"Hosts ({job.get('processes', len(hosts))} processes)", title_justify="left")
    for column in ("process", "host", "status", "steps", "median step", "own work", "waiting", "device", "devices", "peak HBM"):
        table.add_column(column, justify="left" if column in ("process", "host", "status") else "right")
    for h in hosts:
        style = "bold red" if h["process_index"] in slow else ""
        table.add_row(
            str(h["process_index"] if h["process_index"] is not None else h["shard"]),
            h["hostname"] or "n/a",
            h["status"],
            str(h["steps"]),
            fmt.seconds(h["median_s"]),
            fmt.seconds(h["own_median_s"]),
            fmt.seconds(h["wait_median_s"]),
            fmt.seconds(h["device_median_s"]),
            str(h["devices"]) if h["devices"] is not None else "n/a",
            fmt.bytes_(h["peak_hbm_bytes"]) if h["peak_hbm_bytes"] is not None else "n/a",
            style=style,
        )
    parts: list[RenderableType] = [table, Text("own work: the median iteration minus the time blocked in syncs, collectives and backward(); waiting: that blocked time", style="dim")]
    for s in doc.get("stragglers") or []:
        parts.append(Text(f"straggler: {s['text']}", style="red"))
    if job.get("note"):
        parts.append(Text(job["note"], style="dim"))
    return Group(*parts)
