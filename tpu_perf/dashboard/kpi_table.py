"""The compare page's KPI table as HTML: one row per KPI, one column per run, every value with its
unit and its change against the baseline, "n/a" with the reason on hover.

Why not `st.metric` cards: at 1280 px with two runs or more their values and labels are cut
("51.…", "Median s…"); a table sized by its content never cuts a number, and reads across runs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

CSS = """
<style>
.tp-kpis-box { overflow-x: auto; }  /* many runs at 1280 px: the table scrolls in its box, nothing off-screen */
.tp-kpis { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
.tp-kpis th, .tp-kpis td { padding: 0.35rem 0.6rem; border-bottom: 1px solid rgba(49, 51, 63, 0.12); text-align: right; vertical-align: top; }
.tp-kpis th:first-child { text-align: left; font-weight: 600; white-space: normal; }
.tp-kpis thead th { text-align: right; white-space: normal; overflow-wrap: anywhere; font-weight: 600; }
.tp-kpis thead .tp-sub { display: block; font-weight: 400; font-size: 0.75rem; color: rgba(49, 51, 63, 0.6); }
.tp-kpis td .tp-v { font-size: 1.05rem; white-space: nowrap; }
.tp-kpis td .tp-d { display: block; font-size: 0.8rem; white-space: nowrap; }
.tp-kpis .tp-better { color: #09ab3b; } .tp-kpis .tp-worse { color: #ff2b2b; } .tp-kpis .tp-same { color: rgba(49, 51, 63, 0.6); }
.tp-kpis .tp-na { color: rgba(49, 51, 63, 0.6); text-decoration: underline dotted; cursor: help; }
</style>
"""


def _delta(change: float | None, lower_is_better: bool, neutral: bool = False) -> str:
    """"−64.2 % faster"-style change, coloured by whether it is better; empty when unknown.
    `neutral`: grey, whatever the sign (a workload property, or a change the verdict cannot claim)."""
    if change is None or (isinstance(change, float) and math.isnan(change)):
        return ""
    if abs(change) < 0.0005:
        return '<span class="tp-d tp-same">±0.0 %</span>'
    arrow = "▲" if change > 0 else "▼"
    tone = "tp-same" if neutral else "tp-better" if (change < 0) == lower_is_better else "tp-worse"
    return f'<span class="tp-d {tone}">{arrow} {change * 100:+.1f} %</span>'


def _cell(row: Mapping[str, Any]) -> str:
    if isinstance(row["why"], str):
        return f'<td><span class="tp-v tp-na" title="{html.escape(str(row["why"]))}">n/a</span></td>'
    grey = bool(row.get("neutral", False)) or row.get("claim") is False
    return f'<td><span class="tp-v">{html.escape(str(row["shown"]))}</span>{_delta(row["delta"], bool(row["lower_is_better"]), grey)}</td>'


def kpi_table_html(rows: pd.DataFrame, labels: list[str], headers: Mapping[str, str], baseline: str) -> str:
    """The table for `shape.kpi_rows` output (columns kpi, run, shown, delta, lower_is_better, neutral, help, why)."""
    head = "".join(
        f'<th title="{html.escape(headers.get(label, ""))}">{html.escape(label)}<span class="tp-sub">{"baseline · " if label == baseline else ""}{html.escape(headers.get(label, ""))}</span></th>'
        for label in labels
    )
    grouped: dict[Any, dict[str, dict[str, Any]]] = {}  # plain records, not groupby/iterrows: a tenth of the time on a rerun
    for r in rows.to_dict("records"):
        grouped.setdefault(r["kpi"], {})[r["run"]] = r
    body = []
    for kpi, by_run in grouped.items():
        first = next(iter(by_run.values()))
        cells = "".join(_cell(by_run[label]) if label in by_run else "<td></td>" for label in labels)
        body.append(f'<tr><th title="{html.escape(str(first["help"]))}">{html.escape(str(kpi))}</th>{cells}</tr>')
    return f'{CSS}<div class="tp-kpis-box"><table class="tp-kpis"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
