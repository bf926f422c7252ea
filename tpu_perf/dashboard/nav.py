"""The dashboard's page registry: one module per page under `screens/` (what pages share in a
session, and the way from one page to another, is `state.py`)."""

from __future__ import annotations

import streamlit as st


def pages() -> dict[str, st.Page]:
    from tpu_perf.dashboard.screens import compare, history, run, runs

    return {
        "runs": st.Page(runs.render, title="Runs", icon=":material/table_rows:", url_path="home", default=True),
        # The default page is served at "/" only; this hidden twin answers "/runs" (a link people type).
        "runs_path": st.Page(runs.render, title="Runs", icon=":material/table_rows:", url_path="runs", visibility="hidden"),
        "compare": st.Page(compare.render, title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        "run": st.Page(run.render, title="Run", icon=":material/monitoring:", url_path="run"),
        "history": st.Page(history.render, title="History", icon=":material/timeline:", url_path="history"),
    }
