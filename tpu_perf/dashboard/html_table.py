"""Small tables drawn as HTML: the Memory tab's figures, its per-device peaks and largest buffers.

Why not `st.dataframe` or `st.metric`: the grid is a canvas whose code the browser loads the first
time a page shows one (0.1-0.2 s of its main thread on the Memory tab's first opening) and redraws
on every rerun, and each metric card is its own styled component. Tables of a dozen rows read as
well in HTML, wrap a long path at 1280 px instead of cutting it, and cost the page a millisecond.
Every value is text as the report's views write it ("n/a" where unknown, never "None" or "nan").
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd

CSS = """
<style>
.tp-table-box { overflow-x: auto; margin: 0.25rem 0 0.75rem; }  /* wider than its box: scrolls inside it */
.tp-table { border-collapse: collapse; width: 100%; font-size: 0.9rem; font-variant-numeric: tabular-nums; }
.tp-table th, .tp-table td { padding: 0.3rem 0.6rem; border-bottom: 1px solid rgba(49, 51, 63, 0.12); text-align: left; vertical-align: top; white-space: nowrap; }
.tp-table .tp-wrap { white-space: normal; overflow-wrap: anywhere; min-width: 10rem; }  /* long text (a path, an op name) wraps; short values never break */
.tp-table th { font-weight: 600; }
.tp-table thead th { white-space: normal; vertical-align: bottom; }  /* a header wraps between words: its column is as wide as its values */
.tp-table .tp-num { text-align: right; }
.tp-table .tp-na { color: rgba(49, 51, 63, 0.6); }
.tp-table caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: 0.3rem; }
.tp-facts { display: flex; flex-wrap: wrap; gap: 0.5rem 2.5rem; margin: 0.25rem 0 0.75rem; }
.tp-facts div { display: flex; flex-direction: column; }
.tp-facts .tp-label { font-size: 0.85rem; color: rgba(49, 51, 63, 0.75); }
.tp-facts .tp-value { font-size: 1.6rem; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tp-facts [title] .tp-label { text-decoration: underline dotted; cursor: help; }
</style>
"""


def _text(value: Any) -> str:
    """A cell as the user reads it: unknown is "n/a"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return str(value)


def _kind(column: Any, numeric: Collection[str], wrap: Collection[str]) -> str:
    return "tp-num" if column in numeric else "tp-wrap" if column in wrap else ""


def table_html(
    frame: pd.DataFrame, *, numeric: Collection[str] = (), wrap: Collection[str] = (), caption: str | None = None,
    index: bool = False, labels: Mapping[str, str] | None = None, helps: Mapping[str, str] | None = None,
) -> str:
    """`frame` (values already formatted) as a table: `numeric` columns right-aligned, `wrap` columns
    (long text) wrapped, the others kept on one line, the table scrolling in its box if it must.
    `index`: the frame's index as the first column, in bold. A header says `labels[column]` (else
    the column), with `helps[column]` on hover; each keeps its column's name in `data-col`, and the
    table its index's in `data-index`, so a test reads the table back by the frame's own names."""
    labels, helps = labels or {}, helps or {}
    keys = [frame.index.name or ""] if index else []
    head = "".join(f'<th data-col="{html.escape(str(k))}"></th>' for k in keys)
    for c in frame.columns:
        hover = f' title="{html.escape(helps[c])}"' if c in helps else ""
        head += f'<th class="{_kind(c, numeric, wrap)}" data-col="{html.escape(str(c))}"{hover}>{html.escape(str(labels.get(c, c)))}</th>'
    rows = []
    for name, record in zip(frame.index, frame.itertuples(index=False, name=None), strict=True):
        cells = [f"<th>{html.escape(_text(name))}</th>"] if index else []
        for column, value in zip(frame.columns, record, strict=True):
            text = _text(value)
            kind = _kind(column, numeric, wrap) + (" tp-na" if text == "n/a" else "")
            cells.append(f'<td class="{kind.strip()}">{html.escape(text)}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    named = f' data-index="{html.escape(str(frame.index.name or ""))}"' if index else ""
    return f'{CSS}<div class="tp-table-box"><table class="tp-table"{named}>{title}<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def facts_html(facts: Sequence[tuple[str, str, str | None]]) -> str:
    """A row of (label, value, help) figures, as metric cards read, wrapping on a narrow page; the help on hover."""
    items = []
    for label, value, help_ in facts:
        hover = ' title="' + html.escape(help_) + '"' if help_ else ""
        items.append(f'<div{hover}><span class="tp-label">{html.escape(label)}</span><span class="tp-value">{html.escape(value)}</span></div>')
    return f'{CSS}<div class="tp-facts">{"".join(items)}</div>'
