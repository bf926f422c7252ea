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
    for column in ("process", "host", "status", "steps", "median step", "own work", "waiting", "device", "devices", "peak HBM", "top op (trace)"):
        table.add_column(column, justify="left" if column in ("process", "host", "status", "top op (trace)") else "right")
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
            _top_op(h.get("top_ops") or []),
            style=style,
        )
    parts: list[RenderableType] = [table, Text("own work: the median iteration minus the time blocked in syncs, collectives and backward(); waiting: that blocked time", style="dim")]
    for s in doc.get("stragglers") or []:
        parts.append(Text(f"straggler: {s['text']}", style="red"))
    if job.get("note"):
        parts.append(Text(job["note"], style="dim"))
    spread = render_ops_spread(doc.get("ops_spread") or [])
    if spread is not None:
        parts.append(spread)
    return Group(*parts)


SPREAD_ROWS = 5
"""Rows of the ops-over-hosts table in the text report; `report --json` has them all."""


def _top_op(ops: list[dict[str, Any]]) -> str:
    if not ops:
        return "n/a"
    top = ops[0]
    return f"{top['name']} ({fmt.percent(top['share'], 0)})" if top.get("share") is not None else str(top["name"])


def render_ops_spread(spread: list[dict[str, Any]]) -> RenderableType | None:
    """Each op's time over the hosts' trace windows: min, median, max and the slowest host."""
    if not spread:
        return None
    table = Table(title="Ops over hosts (trace window)", title_justify="left")
    for column in ("op", "hosts", "min", "median", "max", "slowest host"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for s in spread[:SPREAD_ROWS]:
        table.add_row(str(s["op"]), str(s["hosts"]), fmt.seconds(s["min_s"]), fmt.seconds(s["median_s"]), fmt.seconds(s["max_s"]), str(s["slowest_host"]))
    return table
