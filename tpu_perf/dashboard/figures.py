"""Plotly figure builders. Each takes plain data (labels, DataFrames, dicts) and returns a figure;
none calls Streamlit, so they can be built and checked anywhere.

Runs keep one colour across every figure of a page: the n-th label gets the n-th colour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from tpu_perf.analyzers.ops_compare import short_name

PALETTE = qualitative.Plotly
MIB = 2**20
WEBGL_ABOVE_POINTS = 2000
"""Lines longer than this draw with WebGL (Scattergl): 10k-step runs stay fast; short ones stay SVG."""


def _line(n: int) -> type[go.Scatter] | type[go.Scattergl]:
    return go.Scattergl if n > WEBGL_ABOVE_POINTS else go.Scatter


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _layout(fig: go.Figure, title: str, **axes: str) -> go.Figure:
    fig.update_layout(title=title, margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h", "y": -0.2}, height=360, **axes)
    return fig


X_AXES = {"step": "step", "wall": "time since start (s)"}
"""Step-time x-axes: the step's index, or when it started in seconds since the run started."""


def step_times(series: Sequence[tuple[str, pd.DataFrame]], *, log: bool = True, x: str = "step") -> go.Figure:
    """Step time over steps (or over wall-clock time, `x="wall"`), one line per run; warm-up steps
    marked. Log scale by default: a compiling first step is 100x a steady one. Ticks in µs/ms/s."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: one of {', '.join(X_AXES)}")
    column = "step" if x == "step" else "t_s"
    fig = go.Figure()
    shade: tuple[float, float] | None = None
    for i, (label, steps) in enumerate(series):
        if steps.empty:
            continue
        fig.add_trace(_line(len(steps))(x=steps[column], y=steps["duration_s"] * 1e3, mode="lines", name=label, line={"color": colour(i)}, legendgroup=label))
        warm = steps[steps["phase"] == "warm-up"]
        if not warm.empty:
            fig.add_trace(go.Scatter(x=warm[column], y=warm["duration_s"] * 1e3, mode="markers", name=f"{label} · warm-up", marker={"color": colour(i), "symbol": "x", "size": 10}, legendgroup=label))
            if x == "step":
                span = (-0.5, len(warm) - 0.5)
            else:
                span = (float(warm["t_s"].min()), float((warm["t_s"] + warm["duration_s"]).max()))
            shade = span if shade is None else (min(shade[0], span[0]), max(shade[1], span[1]))
    if shade is not None and all(math.isfinite(v) for v in shade):
        fig.add_vrect(x0=shade[0], x1=shade[1], fillcolor="grey", opacity=0.15, line_width=0, annotation_text="warm-up", annotation_position="top left")
    values = [float(v) for _, steps in series if not steps.empty for v in steps["duration_s"].dropna() * 1e3 if v > 0]
    if log:
        ticks = log_ticks(min(values), max(values)) if values else []
        fig.update_yaxes(type="log", tickvals=ticks or None, ticktext=[_ms(t) for t in ticks] or None)
    else:
        ticks = linear_ticks(0.0, max(values)) if values else []
        fig.update_yaxes(type="linear", rangemode="tozero", tickvals=ticks or None, ticktext=[_ms(t) for t in ticks] or None)
    return _layout(fig, "Step time over steps" if x == "step" else "Step time over time", xaxis_title=X_AXES[x], yaxis_title="step time (log)" if log else "step time")


def linear_ticks(low: float, high: float, most: int = 8) -> list[float]:
    """Evenly spaced ticks at a 1-2-5 step (0, 20, 40 ms...; 0, 5, 10, 15, 20 s), at most `most`
    of them covering [low, high]: round values a person reads, in the same units as the log axis."""
    if not high > low:
        return [low]
    raw = (high - low) / (most - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 5.0, 10.0) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    count = math.ceil((high - first) / step - 1e-9)
    return [round(first + k * step, 12) for k in range(count + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks per decade covering [low, high] (only 1s and 10s past 3 decades, where 2 and 5
    would crowd the axis): readable values, not only powers of ten."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1.0,) if last - first > 3 else (1.0, 2.0, 5.0)
    ticks = [m * 10.0**k for k in range(first, last + 1) for m in steps]
    inside = [t for t in ticks if low / 1.5 <= t <= high * 1.5]
    return inside if len(inside) >= 2 else ticks


def _ms(value_ms: float) -> str:
    """A tick in ms as a person reads it: 500 µs, 2 ms, 1 s (and 0)."""
    if value_ms == 0:
        return "0"
    if value_ms >= 1000:
        return f"{value_ms / 1000:g} s"
    if value_ms >= 1:
        return f"{value_ms:g} ms"
    return f"{value_ms * 1000:g} µs"


def step_distribution(series: Sequence[tuple[str, np.ndarray]]) -> go.Figure:
    """Steady-state step times as box plots (median, quartiles, whiskers), one per run."""
    fig = go.Figure()
    for i, (label, durations_s) in enumerate(series):
        if len(durations_s):
            fig.add_trace(go.Box(y=np.asarray(durations_s) * 1e3, name=label, marker_color=colour(i), boxmean=True, boxpoints=False))
    return _layout(fig, "Steady-state step time distribution", yaxis_title="step time (ms)")


def memory_timeline(series: Sequence[tuple[str, pd.DataFrame]], *, title: str = "Device memory in use") -> go.Figure:
    """Memory in use over time since each run started, one line per run and device."""
    fig = go.Figure()
    for i, (label, samples) in enumerate(series):
        for j, (device, rows) in enumerate(samples.groupby("device", sort=True)):
            fig.add_trace(_line(len(rows))(x=rows["t_s"], y=rows["bytes_in_use"].astype(float) / MIB, mode="lines", name=f"{label} · {device}", line={"color": colour(i), "dash": ["solid", "dot", "dash", "dashdot"][j % 4]}))
    return _layout(fig, title, xaxis_title="time since start (s)", yaxis_title="in use (MiB)")


def breakdown_bars(breakdowns: Mapping[str, Mapping[str, float]]) -> go.Figure:
    """The step-time breakdown as one stacked horizontal bar per run (fractions of the step)."""
    parts: list[str] = []
    for fractions in breakdowns.values():
        parts += [p for p in fractions if p not in parts]
    labels = list(breakdowns)
    fig = go.Figure()
    for part in parts:
        values = [100 * float(breakdowns[label].get(part) or 0.0) for label in labels]
        name = part.replace("_", " ")
        fig.add_trace(go.Bar(y=labels, x=values, name=name, orientation="h", hovertemplate="%{y}: %{x:.1f} %<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal")  # the legend in the bars' order, left to right
    return _layout(fig, "Step-time breakdown", xaxis_title="% of step time")


def top_ops(table: pd.DataFrame, labels: Sequence[str]) -> go.Figure:
    """Grouped horizontal bars of each op's time per step per device in each run (ms); names
    shortened on the axis, the full names on hover. `table` is `ops_compare.ops_side_by_side`."""
    fig = go.Figure()
    full = [str(i) for i in table.index]
    short = [short_name(i, 40) for i in full]
    names = table["ops"].astype(str).tolist() if "ops" in table else full
    for i, label in enumerate(labels):
        if label in table:
            share = table.get(f"{label} % of step", pd.Series([float("nan")] * len(table), index=table.index)).astype(float) * 100
            fig.add_trace(go.Bar(
                y=short, x=table[label].astype(float) * 1e3, name=label, orientation="h", marker_color=colour(i),
                customdata=list(zip(full, names, share.round(1), strict=True)),
                hovertemplate="%{customdata[0]}<br>%{x:.3f} ms per step per device (%{customdata[2]} % of step)<br>%{customdata[1]}<extra>" + label + "</extra>",
            ))  # fmt: skip
    fig.update_layout(barmode="group", yaxis={"autorange": "reversed"})
    fig = _layout(fig, "Top ops: time per step per device", xaxis_title="ms per step per device")
    fig.update_layout(height=max(360, 28 * len(table) * max(1, len(labels))))
    return fig


def fusion_bars(by_kind: Mapping[str, Mapping[str, int]]) -> go.Figure:
    """Fusions of the step program by kind (kLoop, kInput, kOutput, kCustom...), grouped by run."""
    kinds = sorted({k for counts in by_kind.values() for k in counts})
    fig = go.Figure()
    for i, (label, counts) in enumerate(by_kind.items()):
        fig.add_trace(go.Bar(x=kinds, y=[counts.get(k, 0) for k in kinds], name=label, marker_color=colour(i)))
    fig.update_layout(barmode="group")
    return _layout(fig, "Fusions by kind (step program)", yaxis_title="fusions")
