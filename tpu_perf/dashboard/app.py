"""Streamlit entry script: `tpu-perf dashboard [STORE]` runs `streamlit run` on this file.

The store comes from TPU_PERF_STORE (the CLI sets it). Pages live in `tpu_perf.dashboard.screens`.
"""

from __future__ import annotations

import streamlit as st
from PIL import Image, ImageDraw

from tpu_perf.dashboard import data, nav, palette
from tpu_perf.views import format as fmt

PRICE = "price_per_chip_hour"  # session_state key: USD per chip-hour for cost per 1M tokens; 0 = not given
PRICE_PARAM = "price"  # the URL's copy of it, so a shared or reloaded link keeps the price
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
    page = st.navigation(list(nav.pages().values()))
    problem = None
    if PRICE not in st.session_state:  # a new session: the URL's price, if it has a usable one
        st.session_state[PRICE], problem = nav.price_from_url(st.query_params.get(PRICE_PARAM))
    with st.sidebar:
        st.caption(f"Store: {fmt.md_code(data.store_location())}")
        if problem:
            st.warning(problem)
        st.number_input("Price per chip-hour (USD)", min_value=0.0, step=0.1, format="%.2f", key=PRICE, help="For cost per million tokens on the compare page; 0 hides it. Kept in the URL (`price=`).")
    page.run()
    if st.session_state[PRICE]:  # after the page, which may rewrite its own query parameters
        st.query_params[PRICE_PARAM] = f"{st.session_state[PRICE]:g}"
    elif PRICE_PARAM in st.query_params:
        del st.query_params[PRICE_PARAM]


main()
