"""Every colour the dashboard draws with, in one place.

- A run has the colour of its position in the selection (`run_colour(i)`): the first run picked is
  blue on every chart of the compare page, and the run page's single run is the first colour too.
  Charts that leave a run out (no fusions, no steps) still colour the others by their position.
- A part of the step-time breakdown has one fixed colour project-wide (`part_colour`), whatever
  parts a run has and on whichever page it is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

RUNS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
"""Run colours in selection order (Plotly's D3 category colours, distinguishable side by side)."""

PARTS = {
    "matmul": "#3b5ba5",
    "collective": "#8e44ad",
    "data_movement": "#e67e22",
    "compute": "#5dade2",
    "device_idle": "#b0b0b0",
    "compile": "#16a085",
    "input": "#c0392b",
    "host": "#f4d03f",
}
"""One colour per breakdown part (`tpu_perf.analyzers.breakdown.PARTS`): compute parts blue-ish,
waiting parts grey/red/yellow, compile teal everywhere."""

OTHER_PART = "#7f7f7f"


def run_colour(index: int) -> str:
    """The colour of the run at `index` in the selection (cycling past 10 runs)."""
    return RUNS[index % len(RUNS)]


def run_colours(labels: Sequence[str]) -> dict[str, str]:
    """{label: colour} by position, for a chart that draws only some of the selected runs."""
    return {label: run_colour(i) for i, label in enumerate(labels)}


def part_colour(part: str) -> str:
    """A breakdown part's colour; `part` as in the report (`data_movement`) or as shown (`data movement`)."""
    return PARTS.get(part.replace(" ", "_"), OTHER_PART)
