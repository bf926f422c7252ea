"""The dashboard's pages and how to move between them (one module per page under `screens/`)."""

from __future__ import annotations

import streamlit as st

SELECTION = "selection"
"""session_state key: the run ids picked on the runs page (kept while pages change)."""


def pages() -> dict[str, st.Page]:
    from tpu_perf.dashboard.screens import compare, run, runs

    return {
        "runs": st.Page(runs.render, title="Runs", icon=":material/table_rows:", url_path="home", default=True),
        # The default page is served at "/" only; this hidden twin answers "/runs" (a link people type).
        "runs_path": st.Page(runs.render, title="Runs", icon=":material/table_rows:", url_path="runs", visibility="hidden"),
        "compare": st.Page(compare.render, title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        "run": st.Page(run.render, title="Run", icon=":material/monitoring:", url_path="run"),
    }


def go(page: str, **query: str) -> None:
    """Switch to `page`, carrying `query` in the URL so the view can be shared and reloaded."""
    st.switch_page(pages()[page], query_params=query)


def selected_ids(param: str) -> list[str]:
    """Run ids from the URL's `param` (comma-separated), else the runs page's selection."""
    raw = st.query_params.get(param)
    if raw:
        return [i for i in raw.split(",") if i]
    return list(st.session_state.get(SELECTION, []))
