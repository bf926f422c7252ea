"""Streamlit entry script: `tpu-perf dashboard [STORE]` runs `streamlit run` on this file.

The store comes from TPU_PERF_STORE (the CLI sets it). Pages live in `tpu_perf.dashboard.screens`.
"""

from __future__ import annotations

import streamlit as st
from PIL import Image, ImageDraw

from tpu_perf.dashboard import data, nav, palette, state
from tpu_perf.views import format as fmt

# (No bare string literals below the module docstring: Streamlit's "magic" would print them.)


# The wide layout keeps 5 rem a side; at 1280 px beside the sidebar that is 130 px of table lost.
NARROW_MARGINS = "<style>.stMainBlockContainer { padding-left: 1.5rem; padding-right: 1.5rem; max-width: none; }</style>"


def icon() -> Image.Image:
    """The tab's icon, drawn here: a `:material/...:` or emoji icon is fetched from the internet by
    the browser, and the dashboard must work offline."""
    image = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    for i, height in enumerate((12, 22, 30)):
        draw.rectangle((2 + 10 * i, 31 - height, 9 + 10 * i, 31), fill=palette.run_colour(i))
    return image


def main() -> None:
    st.set_page_config(page_title="tpu-perf dashboard", page_icon=icon(), layout="wide")
    st.html(NARROW_MARGINS)
    pages = nav.pages()
    st.session_state[state.PAGES] = pages  # for state.go: a page cannot import the registry that imports it
    page = st.navigation(list(pages.values()))
    problem = None
    if state.PRICE not in st.session_state:  # a new session: the URL's price, if it has a usable one
        st.session_state[state.PRICE], problem = state.price_from_url(st.query_params.get(state.PRICE_PARAM))
    with st.sidebar:
        st.caption(f"Store: {fmt.md_code(data.store_location())}")
        if problem:
            st.warning(problem)
        st.number_input("Price per chip-hour (USD)", min_value=0.0, step=0.1, format="%.2f", key=state.PRICE, help="For cost per million tokens on the compare page; 0 hides it. Kept in the URL (`price=`).")
    page.run()
    if st.session_state[state.PRICE]:  # after the page, which may rewrite its own query parameters
        st.query_params[state.PRICE_PARAM] = f"{st.session_state[state.PRICE]:g}"
    elif state.PRICE_PARAM in st.query_params:
        del st.query_params[state.PRICE_PARAM]


main()
