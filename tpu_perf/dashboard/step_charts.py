"""The step-time charts of the run and compare pages, built once per (runs, their stamps, axes).

A change of comparison back to runs shown before, a click on another tab and back, or a second
visitor of a run page redraws these two charts without building them again (about a third of a
warm rerun's server time on 10k-step runs). Kept as objects (`st.cache_resource`), not pickled
copies: Streamlit serialises a figure without changing it; treat them as read-only.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from tpu_perf.analyzers.compare import dig
from tpu_perf.dashboard import data, figures

StepSource = tuple[str, str, float, int, bool]
"""(label, run URL, the run's modified stamp, warm-up steps, paced): all a run's step charts depend on."""


def source(label: str, ref: data.RunRef, doc: dict[str, Any]) -> StepSource:
    """What `step_charts` needs of a run, as its report (`doc`) decided its warm-up and pace (`data.phases_of`)."""
    return (label, ref.url, ref.stamp, int(dig(doc, "steps.warmup")), dig(doc, "steps.steady_basis") == "device pace")


@st.cache_resource(max_entries=64, show_spinner=False)
def step_charts(runs: tuple[StepSource, ...], log: bool, x: str) -> tuple[go.Figure, go.Figure] | None:
    """(step time over steps, steady step-time distribution) of `runs`, in their order (colours by
    position); None when none of them recorded a step. Keyed on every run's URL and stamp."""
    frames = [(label, data.step_frame(url, stamp, warmup, paced)) for label, url, stamp, warmup, paced in runs]
    if all(f.empty for _, f in frames):
        return None
    return figures.step_times(frames, log=log, x=x), figures.step_distribution([(label, figures.steady_step_times(f)) for label, f in frames])
