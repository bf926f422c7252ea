"""The History page's chart: a metric over the order key, one line per series, each change point a
dashed line with its commit range and change. Plain data in, a Plotly figure out (no Streamlit)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from tpu_perf.analyzers.history import History

SCALE = {"seconds": (1e3, "ms"), "bytes": (1 / 2**20, "MiB"), "fraction": (100.0, "%"), "per_second": (1.0, "/s")}
"""Unit -> (factor, axis label) the values are shown in."""


def history_figure(history: History) -> go.Figure:
    factor, label = SCALE.get(history.unit, (1.0, ""))
    fig = go.Figure()
    for i, series in enumerate(history.series):
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        keys = [p.key for p in series.points]
        values = [p.value * factor for p in series.points]
        spread = {"type": "data", "symmetric": False, "array": [(p.high - p.value) * factor for p in series.points], "arrayminus": [(p.value - p.low) * factor for p in series.points], "visible": any(p.n > 1 for p in series.points)}
        name = f"series {i + 1}" + (f" ({', '.join(series.differs)} differ)" if series.differs else "")
        hover = [f"{p.key}<br>{p.value * factor:.4g} {label} (median of {p.n})<br>runs: {', '.join(p.runs[:3])}" for p in series.points]
        fig.add_trace(go.Scatter(x=keys, y=values, mode="lines+markers", name=name, line={"color": colour}, error_y=spread, hovertext=hover, hoverinfo="text"))
        for cp in series.change_points:
            fig.add_shape(type="line", x0=cp.at, x1=cp.at, xref="x", yref="paper", y0=0, y1=1, line={"color": colour, "dash": "dash"})
            fig.add_annotation(x=cp.at, yref="paper", y=1.0, text=f"{cp.previous}→{cp.at}: {cp.change:+.1%}", showarrow=False, yanchor="bottom", font={"color": colour})
    fig.update_layout(xaxis_title=history.order_by.replace("tag:", ""), yaxis_title=f"{history.metric} ({label})" if label else history.metric, xaxis={"type": "category"}, margin={"t": 40}, legend={"orientation": "h"})
    return fig
