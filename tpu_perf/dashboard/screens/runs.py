"""Runs page: every run of the store in one table, with filters; pick runs to compare or open."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from tpu_perf.dashboard import data, nav, widgets
from tpu_perf.views import format as fmt

LIVE_REFRESH_S = 2.0
"""While a run in the store is recording, the table is re-read this often."""

MIB = 2**20


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """The rows as shown: times in ms, fractions in %, bytes in MiB (raw values times a unit)."""
    frame = pd.DataFrame(rows)
    shown = pd.DataFrame(
        {
            "name": frame["name"],
            "tags": [t or "" for t in frame.get("tags", [None] * len(frame))],
            "status": frame["status"],
            "chip": [(f"{c} × {n}" if n else str(c)) if c else "n/a" for c, n in zip(frame.get("chip", [None] * len(frame)), frame.get("devices", [None] * len(frame)), strict=True)],
            "framework": [f or "n/a" for f in frame.get("framework", [None] * len(frame))],
            "started": [dt.datetime.fromtimestamp(t) if pd.notna(t) else None for t in frame["started_at"]],  # local time, as `tpu-perf ls`
            "steps": frame.get("steps"),
            "median step (ms)": frame.get("median_step_s") * 1e3 if "median_step_s" in frame else None,
            "MFU (%)": frame.get("mfu") * 100 if "mfu" in frame else None,
            "tokens/s": frame.get("tokens_per_s"),
            "peak HBM (MiB)": frame.get("peak_hbm_bytes") / MIB if "peak_hbm_bytes" in frame else None,
            "id": frame["id"],
        }
    )
    return shown.astype({c: "float64" for c in ("median step (ms)", "MFU (%)", "tokens/s", "peak HBM (MiB)")})


COLUMNS = {
    "median step (ms)": st.column_config.NumberColumn(format="%.2f ms", help="steps.median_s: steady-state median"),
    "MFU (%)": st.column_config.NumberColumn(format="%.1f %%", help="mfu of `tpu-perf report --json`"),
    "tokens/s": st.column_config.NumberColumn(format="%.0f"),
    "peak HBM (MiB)": st.column_config.NumberColumn(format="%.2f MiB", help="peak device memory"),
    "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
}


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
    first.dataframe(runs_table(rows), hide_index=True, column_config=COLUMNS, width="stretch")
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
    event = st.dataframe(table, hide_index=True, column_config=COLUMNS, on_select="rerun", selection_mode="multi-row", key="runs_table", width="stretch")
    picked = [str(table["id"].iloc[i]) for i in event.selection.rows] if event is not None else []
    st.session_state[nav.SELECTION] = picked
    left, right, _ = st.columns([2, 2, 4])
    if left.button(f"Compare {len(picked)} selected runs", disabled=len(picked) < 2, type="primary", key="compare_button"):
        nav.go("compare", runs=",".join(picked))
    if right.button("Open selected run", disabled=len(picked) != 1, key="open_button"):
        nav.go("run", run=picked[0])
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
