"""The run page's "at the peak" part of the Memory tab: `memory.at_peak` (and each slice's `aot.at_peak`)
as one stacked bar of categories and a table of the largest buffers; the failed allocation first
when the run died out of device memory."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.analyzers.at_peak_compare import category_shift
from tpu_perf.dashboard import bars, html_table, palette
from tpu_perf.views import format as fmt
from tpu_perf.views.aot import aot_entries
from tpu_perf.views.at_peak import shift_sentence, spaces_lines

COLORS = {"parameters": "#4C78A8", "optimizer_state": "#F58518", "kv_cache": "#EECA3B", "gradients": "#E45756", "activations": "#72B7B2", "inputs": "#54A24B", "temporaries": "#B279A2", "other": "#9D755D"}


def categories_html(at_peak: dict[str, Any], title: str) -> str:
    """One bar, the bytes live at the peak split by category (HTML, `bars`), each one's bytes on hover."""
    sizes = {name: float(size) for name, size in at_peak["categories"].items() if size}
    return bars.stacked_bars_html(
        {"at the peak": sizes}, title=title, axis="share of the bytes live at the peak", colour=lambda name: COLORS.get(name, palette.OTHER_PART),
        hover=lambda _, name, size: f"{name.replace('_', ' ')}: {fmt.bytes_(size)}",
    )  # fmt: skip


def buffers_frame(at_peak: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame([
        {"bytes": fmt.bytes_(b["bytes"]), "category": b["category"], "shape": b["shape"], "op": b["op"], "op name": b["op_name"] or "", "source": b["source"] or ""}
        for b in at_peak["top_buffers"]
    ])


def _one(at_peak: dict[str, Any], title: str) -> None:
    st.html(categories_html(at_peak, f"{title}: {fmt.bytes_(at_peak['peak_bytes'])} at the peak of {at_peak['program']}"))
    if at_peak["findings"]:
        st.markdown("\n".join(f"- {finding}" for finding in at_peak["findings"]))
    if lines := spaces_lines(at_peak):
        st.caption("  \n".join(lines))
    st.html(html_table.table_html(buffers_frame(at_peak), numeric=("bytes",), wrap=("op", "op name", "source"), caption="Largest buffers live at the peak"))
    st.caption(f"Liveness: {at_peak['source']} (docs/memory.md)")


def render(doc: dict[str, Any]) -> None:
    memory = doc.get("memory") or {}
    oom = memory.get("out_of_memory")
    if oom:
        failed = f" The allocation that failed: {fmt.bytes_(oom['failed_allocation_bytes'])}." if oom.get("failed_allocation_bytes") is not None else ""
        st.error(f"The script ran out of device memory in {oom['function'] or 'an unknown program'}.{failed} {oom['message']}")
    if memory.get("at_peak"):
        _one(memory["at_peak"], "Step program")
    for a in aot_entries(doc):
        if a.get("at_peak"):
            fits = {True: "fits", False: "does NOT fit", None: "fit unknown"}[a["fits"]]
            _one(a["at_peak"], f"{a['topology']} ({fits}, headroom {fmt.bytes_(a.get('at_peak_headroom_bytes'))})")


def compare_frame(docs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Bytes at the step's peak by category, one column per run ("n/a" without a breakdown)."""
    peaks = {label: (doc.get("memory") or {}).get("at_peak") for label, doc in docs.items()}
    if not any(peaks.values()):
        return pd.DataFrame()
    names = [*next(p for p in peaks.values() if p)["categories"], "peak"]
    rows = []
    for name in names:
        row: dict[str, Any] = {"at the peak": name.replace("_", " ")}
        for label, p in peaks.items():
            row[label] = fmt.bytes_((p["peak_bytes"] if name == "peak" else p["categories"].get(name)) if p else None)
        rows.append(row)
    return pd.DataFrame(rows)


def shift_lines(docs: dict[str, dict[str, Any]]) -> list[str]:
    """Each run against the first: did the peak move, or did bytes only change category."""
    peaks = [(label, (doc.get("memory") or {}).get("at_peak")) for label, doc in docs.items()]
    base_label, base = peaks[0] if peaks else (None, None)
    return [f"{label} against {base_label}: {shift_sentence(category_shift(base, p))}" for label, p in peaks[1:] if base and p]


def render_compare(docs: dict[str, dict[str, Any]]) -> None:
    frame = compare_frame(docs)
    if not frame.empty:
        st.subheader("What fills memory at the step's peak")
        if lines := shift_lines(docs):
            st.markdown("  \n".join(lines))
        st.html(html_table.table_html(frame.set_index("at the peak"), index=True, numeric=[c for c in frame.columns if c != "at the peak"]))
