"""Small Streamlit pieces shared by the pages: error cards, "not recorded" notes."""

from __future__ import annotations

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
