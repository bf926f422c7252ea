"""The dashboard's pages and how to move between them (one module per page under `screens/`)."""

from __future__ import annotations

import streamlit as st

SELECTION = "selection"
"""session_state key: the run ids picked on the runs page (kept while pages change)."""


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


def go(page: str, **query: str) -> None:
    """Switch to `page`, carrying `query` in the URL so the view can be shared and reloaded."""
    st.switch_page(pages()[page], query_params=query)


def selected_ids(param: str) -> list[str]:
    """Run ids from the URL's `param` (comma-separated), else the runs page's selection."""
    raw = st.query_params.get(param)
    if raw:
        return [i for i in raw.split(",") if i]
    return list(st.session_state.get(SELECTION, []))


def price_from_url(raw: str | None) -> tuple[float, str | None]:
    """`?price=2.5` as USD per chip-hour: (price, None); (0.0, None) when absent (no price);
    (0.0, why) when it is not a positive number, so the page can say the URL's value was ignored."""
    if not raw:
        return 0.0, None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        return 0.0, f"price={raw} in the URL is not a price per chip-hour in USD (e.g. price=1.2); ignored"
    return value, None
