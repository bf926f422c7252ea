"""Small Streamlit pieces shared by the pages: error cards, KPI cards, "not recorded" notes."""

from __future__ import annotations

import pandas as pd
import streamlit as st

STATUS_ICON = {"running": ":material/play_circle:", "completed": ":material/check_circle:", "failed": ":material/cancel:", "interrupted": ":material/stop_circle:", "crashed": ":material/error:"}
"""Material icons (Markdown only; tables show the plain status)."""


def error_card(title: str, message: str) -> None:
    """A run (or folder) that cannot be loaded: say which and why; the page goes on."""
    with st.container(border=True):
        st.error(f"**{title}**\n\n{message}", icon=":material/error:")


def missing(what: str, why: str) -> None:
    """Say plainly that a part has no data, and what would record it."""
    st.info(f"{what}: not recorded. {why}", icon=":material/info:")


def kpi_cards(rows: pd.DataFrame, labels: list[str], headers: dict[str, str]) -> None:
    """One column per run, one `st.metric` per KPI, deltas relative to the baseline run."""
    columns = st.columns(len(labels))
    for column, label in zip(columns, labels, strict=True):
        with column, st.container(border=True):
            st.markdown(f"**{label}**")
            st.caption(headers.get(label, ""))
            mine = list(rows[rows["run"] == label].itertuples())
            grid = st.columns(3)
            for i, row in enumerate(mine):
                change = None if row.delta is None or pd.isna(row.delta) else f"{row.delta:+.1%}"
                grid[i % 3].metric(row.kpi, row.shown, delta=change, delta_color="inverse" if row.lower_is_better else "normal", help=row.help)
