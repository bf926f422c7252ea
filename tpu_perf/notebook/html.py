"""The terminal views as HTML for Jupyter: the same renderables, drawn as HTML tables and text.

The report, advice and check views build rich objects (`views/`); here each one becomes HTML by
its structure (a `Table` a `<table>`, a `Text` a `<div>` with its styles, a `Group` or `Panel` its
parts in order), so the notebook shows the same sections, rows and words as the terminal, without
a second copy of what they say. Figures are the dashboard's Plotly builders, with plotly.js
embedded in the output (no CDN: TPU VMs and Kaggle sessions are often offline, and Colab shows
each output in a frame of its own).
"""

from __future__ import annotations

from html import escape
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

CSS = """<style>
.tpu-perf { font-family: system-ui, sans-serif; font-size: 13px; line-height: 1.4; }
.tpu-perf h3 { font-size: 15px; margin: 4px 0 8px 0; }
.tpu-perf h4 { font-size: 13px; margin: 12px 0 4px 0; }
.tpu-perf table { border-collapse: collapse; margin: 2px 0 6px 0; }
.tpu-perf td, .tpu-perf th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; border-bottom: 1px solid rgba(128,128,128,0.2); }
.tpu-perf table.kv td:first-child { font-weight: 600; white-space: nowrap; }
.tpu-perf .line { white-space: pre-wrap; }
</style>"""

COLOURS = {"red": "#c0392b", "green": "#1e8449", "yellow": "#9a7d0a", "cyan": "#117a8b", "blue": "#2e5eaa", "magenta": "#8e44ad"}
"""Terminal colour names the views use, in shades readable on a white and a dark page."""


def document(title: str, parts: list[str]) -> str:
    """One output: a titled block holding HTML fragments in order."""
    return f'{CSS}<div class="tpu-perf"><h3>{escape(title)}</h3>{"".join(parts)}</div>'


def to_html(item: RenderableType | None) -> str:
    """HTML of a rich renderable as the views build them; an unknown kind as its terminal text."""
    if item is None:
        return ""
    if isinstance(item, Panel):
        title = item.title.plain if isinstance(item.title, Text) else (item.title or "")
        return (f"<h4>{escape(str(title))}</h4>" if title else "") + to_html(item.renderable)
    if isinstance(item, Group):
        return "".join(to_html(part) for part in item.renderables)
    if isinstance(item, Table):
        return _table(item)
    if isinstance(item, Text):
        return f'<div class="line">{_text(item)}</div>'
    if isinstance(item, str):
        return f'<div class="line">{_text(_markup(item))}</div>'
    console = Console(record=True, width=120, file=_Null(), force_jupyter=False)
    console.print(item)
    return f"<pre>{escape(console.export_text())}</pre>"


def _table(table: Table) -> str:
    columns = table.columns
    rows = max((len(c._cells) for c in columns), default=0)
    title = table.title.plain if isinstance(table.title, Text) else table.title
    head = f"<h4>{escape(str(title))}</h4>" if title else ""
    header = "<tr>" + "".join(f"<th>{_cell(c.header)}</th>" for c in columns) + "</tr>" if table.show_header else ""
    body = "".join("<tr>" + "".join(f"<td>{_cell(c._cells[i] if i < len(c._cells) else '')}</td>" for c in columns) + "</tr>" for i in range(rows))
    kind = "" if table.show_header else ' class="kv"'
    return f"{head}<table{kind}>{header}{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, Text):
        return _text(value)
    if isinstance(value, str):
        return _text(_markup(value))
    return to_html(value)


def _markup(value: str) -> Text:
    """A string cell as rich reads it: console markup, or the plain string where it is not markup."""
    try:
        return Text.from_markup(value)
    except Exception:
        return Text(value)


def _text(text: Text) -> str:
    """A Text with its styles: each span's text in a `<span style=...>`."""
    plain = text.plain
    if not plain:
        return ""
    styles: list[list[str]] = [[] for _ in plain]
    base = _css(text.style)
    for span in text.spans:
        css = _css(span.style)
        if css:
            for i in range(max(0, span.start), min(len(plain), span.end)):
                styles[i].append(css)
    out, i = [], 0
    while i < len(plain):
        j = i
        while j < len(plain) and styles[j] == styles[i]:
            j += 1
        chunk = escape(plain[i:j])
        css = ";".join(styles[i])
        out.append(f'<span style="{css}">{chunk}</span>' if css else chunk)
        i = j
    inner = "".join(out)
    return f'<span style="{base}">{inner}</span>' if base else inner


def _css(style: str | Style | None) -> str:
    if not style:
        return ""
    try:
        parsed = Style.parse(style) if isinstance(style, str) else style
    except Exception:
        return ""
    css = []
    if parsed.color is not None and not parsed.color.is_default:
        name = parsed.color.name
        css.append(f"color:{COLOURS.get(name, parsed.color.get_truecolor().hex)}")
    if parsed.bold:
        css.append("font-weight:600")
    if parsed.dim:
        css.append("opacity:0.7")
    if parsed.reverse:
        css.append("padding:0 4px;border:1px solid currentColor")
    return ";".join(css)


def figure(fig: Any) -> str:
    """A Plotly figure as HTML with plotly.js inside (offline)."""
    return fig.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False, "responsive": True})


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
