"""The History page's chart: a metric over the order key, one line per series, each change point a
dashed line with its commit range and change. Plain data in, a Plotly figure out (no Streamlit).

Ordered by start time, the x-axis is a time axis: points of every series fall where their runs
started, so the axis reads left to right in time whatever series a run is in (a category axis put
each series' keys after the previous series', and cut ISO stamps to "2026-…")."""

from __future__ import annotations

import datetime as dt
from pathlib import PurePath

import plotly.graph_objects as go

from tpu_perf.analyzers.history import History, Point, Series, is_number
from tpu_perf.dashboard import figures, palette

SCALE = {"seconds": (1e3, "ms"), "bytes": (1 / 2**20, "MiB"), "fraction": (100.0, "%"), "per_second": (1.0, "/s")}
"""Unit -> (factor, axis label) the values are shown in."""
NAMED = ("framework", "chip", "tokens_per_step", "xla_flags", "libtpu_init_args", "model", "topology")
"""Fingerprint fields a series' name gives when they differ between series (versions are in the hover)."""


def series_label(series: Series, history: History) -> str:
    """"jax_lm.py · jax on cpu" and, where series of the same script differ, the differing values
    ("tokens_per_step=512"): what a user tells series apart by, not "series 2"."""
    print_ = series.fingerprint
    script = PurePath(str(print_.get("script") or "?")).name
    count = f"×{print_['chip_count']}" if str(print_.get("chip_count") or "1") != "1" else ""
    on = " on ".join(str(v) for v in (print_.get("framework"), print_.get("chip")) if v)
    parts = [script, *([on + count] if on else [])]
    varying = {k for s in history.series for k in s.differs} & set(NAMED) - {"framework", "chip"}
    parts += [f"{k}={print_[k]}" for k in sorted(varying) if print_.get(k) is not None]
    return " · ".join(parts)


def _x(point: Point, by_time: bool) -> object:
    if by_time and point.started_at is not None:
        return dt.datetime.fromtimestamp(point.started_at, tz=dt.UTC).replace(tzinfo=None)
    return point.key


def history_figure(history: History) -> go.Figure:
    factor, label = SCALE.get(history.unit, (1.0, ""))
    by_time = history.order_by == "started"
    traces, shapes, annotations = [], [], []
    for i, series in enumerate(history.series):
        colour = palette.run_colour(i)  # the dashboard's one set of colours, each series its own
        xs = [_x(p, by_time) for p in series.points]
        values = [p.value * factor for p in series.points]
        spread = {"type": "data", "symmetric": False, "array": [(p.high - p.value) * factor for p in series.points], "arrayminus": [(p.value - p.low) * factor for p in series.points], "visible": any(p.n > 1 for p in series.points)}
        hover = [f"{p.key}<br>{p.value * factor:.4g} {label} (median of {p.n})<br>runs: {', '.join(p.runs[:3])}" for p in series.points]
        traces.append({"type": "scatter", "x": xs, "y": values, "mode": "lines+markers", "name": series_label(series, history), "line": {"color": colour}, "error_y": spread, "hovertext": hover, "hoverinfo": "text"})
        for cp in series.change_points:
            at = xs[cp.index]
            shapes.append({"type": "line", "x0": at, "x1": at, "xref": "x", "yref": "paper", "y0": 0, "y1": 1, "line": {"color": colour, "dash": "dash"}})
            annotations.append({"x": at, "yref": "paper", "y": 1.0, "text": f"{cp.previous}→{cp.at}: {cp.change:+.1%}", "showarrow": False, "yanchor": "bottom", "font": {"color": colour}})
    title = "started (UTC)" if by_time else history.order_by.replace("tag:", "")
    xaxis = {"type": "date"} if by_time else {"type": "category", "categoryorder": "array", "categoryarray": _keys_in_order(history)}
    layout = {
        "xaxis": {**xaxis, "title": {"text": title}, "automargin": True}, "yaxis": {"title": {"text": f"{history.metric} ({label})" if label else history.metric}}, "margin": {"t": 40},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0}, "height": 420 + 22 * len(history.series),
    }  # fmt: skip
    if shapes:
        layout |= {"shapes": shapes, "annotations": annotations}
    return figures.plain_figure(traces, layout)


def _keys_in_order(history: History) -> list[str]:
    """Every series' keys on one category axis, in the order the series give them (by start where
    a key is not a number), not series after series."""
    firsts: dict[str, float] = {}
    for series in history.series:
        for rank, p in enumerate(series.points):
            firsts.setdefault(p.key, p.started_at if p.started_at is not None else float(rank))
    return sorted(firsts, key=lambda k: (float(k), k) if all(is_number(x) for x in firsts) else (firsts[k], k))

