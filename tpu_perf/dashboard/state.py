"""What the dashboard's pages share in a session, apart from the page registry (`nav.py`, which
imports every page): the runs picked on the runs page, the price per chip-hour, and the way to
another page. A page imports this module, never `nav`."""

from __future__ import annotations

import streamlit as st

SELECTION = "selection"
"""session_state key: the run ids picked on the runs page (kept while pages change)."""

PRICE = "price_per_chip_hour"
"""session_state key: USD per chip-hour for cost per 1M tokens; 0 = not given."""

PRICE_PARAM = "price"
"""The URL's copy of the price, so a shared or reloaded link keeps it."""

PAGES = "pages"
"""session_state key: this run's page registry by name (`nav.pages()`), kept by `app.py` so that a
page can switch to another without importing the registry, which imports it."""


def go(page: str, **query: str) -> None:
    """Switch to `page`, carrying `query` in the URL so the view can be shared and reloaded."""
    st.switch_page(st.session_state[PAGES][page], query_params=query)


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
