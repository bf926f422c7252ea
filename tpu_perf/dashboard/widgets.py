"""Small Streamlit pieces shared by the pages: error cards, "not recorded" notes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from tpu_perf.views.format import md

STATUS_ICON = {"running": ":material/play_circle:", "completed": ":material/check_circle:", "failed": ":material/cancel:", "interrupted": ":material/stop_circle:", "crashed": ":material/error:"}
"""Material icons (Markdown only; tables show the plain status)."""


def error_card(title: str, message: str) -> None:
    """A run (or folder) that cannot be loaded: say which and why; the page goes on."""
    with st.container(border=True):
        st.error(f"**{md(title)}**\n\n{md(message)}", icon=":material/error:")


def missing(what: str, why: str) -> None:
    """Say plainly that a part has no data, and what would record it."""
    st.info(f"{what}: not recorded. {why}", icon=":material/info:")


SCALES = ("log", "linear")
X_CHOICES = {"step": "step", "wall-clock": "wall"}


def step_axes(prefix: str) -> tuple[bool, str]:
    """The step-time chart's axes, chosen by the user: (log scale?, "step" or "wall")."""
    left, right = st.columns(2)
    scale = left.radio("Step-time axis", SCALES, horizontal=True, key=f"{prefix}_scale", help="log shows a compiling step and steady steps together; linear shows steady-state changes in proportion")
    x = right.radio("x-axis", list(X_CHOICES), horizontal=True, key=f"{prefix}_x", help="step index, or when each step started (seconds since the run started): pauses and slow stretches show in time")
    return scale != "linear", X_CHOICES[x or "step"]



@st.fragment
def lazy_tabs(parts: Sequence[tuple[str, Callable[[], None]]], key: str) -> None:
    """Tabs of which only the open one is built: every Plotly chart sent costs the browser 50-100 ms
    to draw on a busy machine (Streamlit's chart draws it twice when it mounts), so a rerun draws
    the open tab's charts, not all of them. A fragment: a click on a tab, or on a widget inside
    one (an axis), reruns the tabs alone, not the page above them."""
    for tab, (_, draw) in zip(st.tabs([name for name, _ in parts], key=key, on_change="rerun"), parts, strict=True):
        if tab.open is not False:  # None: a Streamlit that keeps no tab state builds them all
            with tab:
                draw()
