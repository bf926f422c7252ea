"""Runs page: every run of the store in one table, with filters; pick runs to compare or open."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pandas as pd
import streamlit as st

from tpu_perf.dashboard import data, state, widgets
from tpu_perf.views import format as fmt

LIVE_REFRESH_S = 2.0
"""While a run in the store is recording, the table is re-read this often."""


def _text(values: list, formatter: Callable[[float | None], str]) -> list[str]:
    """A column as shown: each value in its unit, "n/a" where unknown (a number column would show
    "None"; the reason is in the column's help)."""
    return [formatter(None if v is None or pd.isna(v) else float(v)) for v in values]


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """The rows as shown: each number with its unit (`tpu_perf.views.format`, as the CLI prints
    it), `n/a` where unknown; narrow enough that every column shows at 1280 px beside the sidebar."""
    frame = pd.DataFrame(rows)
    n = len(frame)

    def column(name: str) -> list:
        """The column's values, None where unknown (rows of runs without the field come out NaN)."""
        return [None if not isinstance(v, (str, dict, list)) and pd.isna(v) else v for v in frame[name]] if name in frame else [None] * n

    return pd.DataFrame(
        {
            "name": frame["name"],
            "tags": [t or "" for t in column("tags")],
            "status": frame["status"],
            "chip": [(f"{c} × {int(k)}" if k else str(c)) if c else "n/a" for c, k in zip(column("chip"), column("devices"), strict=True)],
            "framework": [f or "n/a" for f in column("framework")],
            "started": [dt.datetime.fromtimestamp(t).strftime("%m-%d %H:%M") if t is not None and pd.notna(t) else "n/a" for t in column("started_at")],  # local time, as `tpu-perf ls`
            "steps": [int(v) if v is not None and pd.notna(v) else 0 for v in column("steps")],
            "step": [text + (" all-in" if basis == "all-in" else "") for text, basis in zip(_text(column("step_s"), fmt.seconds), column("step_basis"), strict=True)],
            "MFU": _text(column("mfu"), fmt.percent),
            "tokens/s": _text(column("tokens_per_s"), lambda v: "n/a" if v is None else f"{v:,.0f}"),
            "peak HBM": _text(column("peak_hbm_bytes"), fmt.bytes_),
            "id": frame["id"],
        }
    )


COLUMNS = {
    "name": st.column_config.TextColumn(width=82),
    "tags": st.column_config.TextColumn(width=72, help="the run's tags (key=value), in full: the table scrolls sideways in its box when they are long"),
    "status": st.column_config.TextColumn(width=76),
    "chip": st.column_config.TextColumn(width=80, help="chip × devices"),
    "framework": st.column_config.TextColumn("frame", width=46, help="framework"),
    "started": st.column_config.TextColumn(width=80, help="when the run started (local time, month-day hour:minute)"),
    "steps": st.column_config.NumberColumn(width=44, help="steps recorded (0: none, e.g. an import of a trace with no step markers)"),
    "step": st.column_config.TextColumn("step", width=96, help="the run's step time (steps.step_s, as `tpu-perf report` and `ls` show it): the steady step time, or \"all-in\" (the wall time per step after the first) where the steady steps were too few or most of the time lay outside them; n/a when no step was recorded"),
    "MFU": st.column_config.TextColumn(width=50, help="mfu of `tpu-perf report --json`; n/a without a model FLOP count and the chip's peak (see the run page)"),
    "tokens/s": st.column_config.TextColumn(width=64, help="n/a unless recorded with --tokens-per-step N"),
    "peak HBM": st.column_config.TextColumn("HBM", width=68, help="peak device memory; n/a without a device memory source"),
    "id": st.column_config.TextColumn(width=165),
}
"""Widths in px: every column shows at 1280 px beside the sidebar (the grid scrolls past that)."""

CHAR_PX = 7.5
"""Width of a character of the grid's 14 px font, generously (Source Sans averages about 7 px; digits and `=` 7.7)."""
CELL_PAD_PX = 24
"""A grid cell's left and right padding, and room for the column's resize handle."""


def column_config(table: pd.DataFrame) -> dict:
    """`COLUMNS` with the tags column as wide as its longest cell (never cut: two runs that differ
    by a tag late in the list must not look the same); past the page's width the grid scrolls in its box."""
    longest = max((len(t) for t in table["tags"]), default=0)
    tags = COLUMNS["tags"]
    return {**COLUMNS, "tags": {**tags, "width": max(int(tags["width"]), round(longest * CHAR_PX) + CELL_PAD_PX)}}


def _filtered(rows: list[dict]) -> list[dict]:
    cols = st.columns([3, 2, 2, 2])
    text = cols[0].text_input("Filter", placeholder="name, tag or id", key="runs_filter").strip().lower()
    choices = {}
    for col, field, label in ((cols[1], "status", "Status"), (cols[2], "framework", "Framework"), (cols[3], "chip", "Chip")):
        options = sorted({str(r.get(field)) for r in rows if r.get(field)})
        choices[field] = col.multiselect(label, options, key=f"runs_{field}")
    out = []
    for r in rows:
        haystack = " ".join(str(r.get(k) or "") for k in ("name", "tags", "id")).lower()
        if text and text not in haystack:
            continue
        if any(chosen and str(r.get(field)) not in chosen for field, chosen in choices.items()):
            continue
        out.append(r)
    return out


def _rows(refs: list[data.RunRef]) -> list[dict]:
    """Every run's row, from the store's runs index where it has one. Runs with no row and never
    analysed before are listed at once from their manifests, then
    analysed (once: the summaries are kept on disk) while a progress bar shows how far it got."""
    indexed = data.indexed_summaries(data.store_location(), refs)  # the runs index: no run analysed
    rows = [data.summary(ref, compute=False, indexed=indexed.get(ref.id)) for ref in refs]
    pending = [i for i, row in enumerate(rows) if row.get("pending")]
    if not pending:
        return rows
    first = st.empty()
    listed = runs_table(rows)
    first.dataframe(listed, hide_index=True, column_config=column_config(listed), width="stretch")
    bar = st.progress(0.0)
    every = max(1, len(pending) // 25)  # a message to the browser per 4 %, not per run
    for done, (i, row) in enumerate(data.analyse([refs[i] for i in pending]), 1):
        if done % every == 0 or done == len(pending):
            bar.progress(done / len(pending), text=f"Analysing {len(pending)} run(s) not seen before ({done}/{len(pending)}); kept for next time")
        rows[pending[i]] = row
    bar.empty()
    first.empty()
    return rows


def _body(listed: tuple[list[data.RunRef], list[str]] | None = None) -> None:
    store = data.store_location()
    refs, errors = listed or data.list_refs(store)
    st.caption(f"Store {fmt.md_code(store)}: {len(refs)} run(s)" + (" · live: a run is recording, refreshing every 2 s" if any(r.status == "running" for r in refs) else ""))
    for message in errors:
        widgets.error_card("A run folder cannot be read", message)
    if not refs:
        st.info(f"No runs in {fmt.md_code(store)} yet. Record one with `tpu-perf record --store STORE train.py`.")
        return
    rows = _rows(refs)
    shown_rows = _filtered(rows)
    if not shown_rows:
        st.info("No run matches the filters.")
        return
    table = runs_table(shown_rows)
    event = st.dataframe(table, hide_index=True, column_config=column_config(table), on_select="rerun", selection_mode="multi-row", key="runs_table", width="stretch")
    picked = [str(table["id"].iloc[i]) for i in event.selection.rows] if event is not None else []
    st.session_state[state.SELECTION] = picked
    left, right, _ = st.columns([2, 2, 4])
    if left.button(f"Compare {len(picked)} selected runs", disabled=len(picked) < 2, type="primary", key="compare_button"):
        state.go("compare", runs=",".join(picked))
    if right.button("Open selected run", disabled=len(picked) != 1, key="open_button"):
        state.go("run", run=picked[0])
    st.caption("Select rows (left edge of the table) to compare two or more runs, or open one.")
    for r in shown_rows:
        if r.get("error"):
            widgets.error_card(f"Run {r['name']} ({r['id']}) cannot be analysed", r["error"])


def render() -> None:
    st.title("Runs")
    listed = data.list_refs(data.store_location())
    if any(r.status == "running" for r in listed[0]):
        st.fragment(_body, run_every=LIVE_REFRESH_S)()  # re-lists the store on every refresh
    else:
        _body(listed)
