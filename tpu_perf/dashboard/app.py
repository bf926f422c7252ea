"""Streamlit entry script: `tpu-perf dashboard [STORE]` runs `streamlit run` on this file.

The store comes from TPU_PERF_STORE (the CLI sets it). Pages live in `tpu_perf.dashboard.screens`.
"""

from __future__ import annotations

import streamlit as st

from tpu_perf.dashboard import data, nav

PRICE = "price_per_chip_hour"  # session_state key: USD per chip-hour for cost per 1M tokens; 0 = not given
# (No bare string literals below the module docstring: Streamlit's "magic" would print them.)


def main() -> None:
    st.set_page_config(page_title="tpu-perf dashboard", page_icon=":material/speed:", layout="wide")
    page = st.navigation(list(nav.pages().values()))
    with st.sidebar:
        st.caption(f"Store: `{data.store_location()}`")
        st.number_input("Price per chip-hour (USD)", min_value=0.0, step=0.1, format="%.2f", key=PRICE, help="For cost per million tokens on the compare page; 0 hides it.")
    page.run()


main()
