"""Stacked share bars (the step-time breakdown, memory at the peak) drawn as HTML, not Plotly.

Why: each Plotly chart costs the browser 50-100 ms of its main thread to draw on a busy machine
(Streamlit's chart draws it twice when it mounts), and the compare page redraws its charts on
every change of comparison. A stacked bar of shares is a row of coloured boxes: as HTML it costs
a millisecond, keeps its colours (`palette`), and says each value on hover.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

from tpu_perf.dashboard import palette

CSS = """
<style>
.tp-bars { font-size: 0.85rem; margin: 0.25rem 0 0.5rem; }
.tp-bars .tp-bars-title { font-weight: 600; font-size: 1rem; margin-bottom: 0.35rem; }
.tp-bars .tp-bars-row { display: flex; align-items: center; gap: 0.6rem; margin: 0.2rem 0; }
.tp-bars .tp-bars-label { flex: 0 0 9rem; text-align: right; overflow-wrap: anywhere; }
.tp-bars .tp-bars-bar { flex: 1 1 auto; display: flex; height: 1.6rem; background: rgba(49, 51, 63, 0.06); }
.tp-bars .tp-bars-bar span { display: flex; align-items: center; justify-content: center; overflow: hidden; white-space: nowrap; font-size: 0.75rem; cursor: default; }
.tp-bars .tp-bars-axis { margin-left: 9.6rem; color: rgba(49, 51, 63, 0.6); font-size: 0.8rem; }
.tp-bars .tp-bars-legend { display: flex; flex-wrap: wrap; gap: 0.2rem 0.9rem; margin: 0.3rem 0 0 9.6rem; }
.tp-bars .tp-bars-legend i { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.3rem; vertical-align: -0.1rem; }
</style>
"""
SAY_SHARE = 0.1
"""A segment of at least this share of its bar says its share inside (narrower ones on hover only)."""


def _ink(hex_colour: str) -> str:
    """Black or white text, whichever reads on the segment's colour."""
    r, g, b = (int(hex_colour[k : k + 2], 16) for k in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def stacked_bars_html(
    rows: Mapping[str, Mapping[str, float]], *, title: str, axis: str, colour: Callable[[str], str], hover: Callable[[str, str, float], str], whole: float | None = None
) -> str:
    """One bar per row, its parts side by side in their first-seen order across rows, each the
    share of `whole` (1.0 for fractions) or, without it, of the row's total; a legend of the parts
    in that order (those above 0 in some row). `hover(row, part, value)` is each segment's tooltip."""
    parts: list[str] = []
    for values in rows.values():
        parts += [p for p, v in values.items() if p not in parts and float(v or 0.0) > 0]
    body = []
    for label, values in rows.items():
        total = sum(max(0.0, float(v)) for v in values.values())
        scale = max(total, whole or 0.0) or 1.0
        segments = []
        for part in parts:
            value = float(values.get(part) or 0.0)
            if value <= 0:
                continue
            share, tint = value / scale, colour(part)
            said = f"{share * 100:.0f} %" if share >= SAY_SHARE else ""
            segments.append(f'<span style="width:{share * 100:.3f}%;background:{tint};color:{_ink(tint)}" title="{html.escape(hover(label, part, value))}">{said}</span>')
        body.append(f'<div class="tp-bars-row"><span class="tp-bars-label" title="{html.escape(label)}">{html.escape(label, quote=False)}</span><div class="tp-bars-bar">{"".join(segments)}</div></div>')
    legend = "".join(f'<span><i style="background:{colour(p)}"></i>{html.escape(p.replace("_", " "), quote=False)}</span>' for p in parts)
    return f'{CSS}<div class="tp-bars"><div class="tp-bars-title">{html.escape(title, quote=False)}</div>{"".join(body)}<div class="tp-bars-axis">{html.escape(axis, quote=False)}</div><div class="tp-bars-legend">{legend}</div></div>'


def breakdown_axis(labels: Sequence[str], whole_trace: Sequence[str]) -> str:
    """What the bars' shares are of: the step, or the whole trace for runs with no per-step breakdown."""
    whole = [label for label in labels if label in whole_trace]
    if not whole:
        return "% of step time"
    if len(whole) == len(labels):
        return "% of the whole trace's time (no per-step breakdown)"
    return f"% of step time (of the whole trace for {', '.join(whole)})"


def breakdown_bars(breakdowns: Mapping[str, Mapping[str, float]], *, whole_trace: Sequence[str] = ()) -> str:
    """The step-time breakdown, one stacked bar per run (fractions of the step; of the whole trace
    for the runs in `whole_trace`), each part in its fixed colour."""

    def hover(label: str, part: str, value: float) -> str:
        return f"{label}: {part.replace('_', ' ')} {value * 100:.1f} % {'of the whole trace' if label in whole_trace else 'of the step'}"

    return stacked_bars_html(breakdowns, title="Step-time breakdown", axis=breakdown_axis(list(breakdowns), whole_trace), colour=palette.part_colour, hover=hover, whole=1.0)
