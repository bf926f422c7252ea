"""Plotly figure builders. Each takes plain data (labels, DataFrames, dicts) and returns a figure;
none calls Streamlit, so they can be built and checked anywhere.

Figures are written as Plotly's own JSON (traces and layout as plain dicts, arrays as numpy) and
wrapped without Plotly's per-property checks (`plain_figure`): `go.Scatter(...)`, `update_layout` and
`add_vrect` validate and coerce every property in Python, which was most of building a chart
(the step-time chart of three 10k-step runs: 16.5 ms of CPU, 61 ms under a profiler, against the
page's 0.45 s). `tests/test_dashboard_figures.py` passes every builder's output through Plotly's
checks and requires it unchanged.

Runs keep one colour across every figure of a page (the n-th run of the selection gets the n-th
colour of `palette`). Stacked share bars (the breakdown) are HTML, in `bars`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from tpu_perf.analyzers.all_in import MIN_STEADY_STEPS
from tpu_perf.analyzers.ops_compare import short_name
from tpu_perf.dashboard import palette

MIB = 2**20
LINE_POINTS = 800
"""Most points a line is drawn with. A 10k-step run is drawn as the minimum and the maximum of
each of 400 stretches of consecutive steps (`envelope`): every spike stays, and the browser gets
a tenth of the data (at 1280 px a half-width chart plots about 500 px, so no pixel column is lost)."""


def envelope(x: np.ndarray, y: np.ndarray, points: int = LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) with at most `points` points: per bucket of consecutive samples its lowest and highest
    (in their order); unchanged when already short. NaN samples are dropped first."""
    keep = ~np.isnan(y)
    x, y = np.asarray(x)[keep], np.asarray(y, dtype=float)[keep]
    if len(y) <= points:
        return x, y
    edges = np.linspace(0, len(y), points // 2 + 1).astype(int)
    lows, highs = np.minimum.reduceat(y, edges[:-1]), np.maximum.reduceat(y, edges[:-1])
    index = np.arange(len(y))
    first_low = np.minimum.reduceat(np.where(y == np.repeat(lows, np.diff(edges)), index, len(y)), edges[:-1])
    first_high = np.minimum.reduceat(np.where(y == np.repeat(highs, np.diff(edges)), index, len(y)), edges[:-1])
    picked = np.unique(np.concatenate([first_low, first_high]))
    return x[picked], y[picked]


CHART_POINTS = 3000
"""Most points one chart's lines share (memory: 8 devices x 3 runs get 200 points each)."""


Trace = dict[str, Any]
"""One trace as Plotly's JSON has it (`type`, `x`, `y`, nested dicts for `line`, `marker`...)."""


def plain_figure(traces: Sequence[Trace], layout: Mapping[str, Any]) -> go.Figure:
    """A figure of traces and layout already in Plotly's JSON form, not checked property by property
    (`_validate=False`: the same figure, built about 10x faster; the tests check it as Plotly would).
    Arrays are numpy arrays, as Plotly's checks would have made them (sent as typed arrays)."""
    return go.Figure(data=list(traces), layout=dict(layout), _validate=False)


def _array(values: pd.Series | np.ndarray | Sequence[Any]) -> np.ndarray:
    """What Plotly's checks make of a column: a numpy array (sent as a typed array)."""
    return values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)


def _line(x: pd.Series | np.ndarray, y: pd.Series | np.ndarray, *, points: int = LINE_POINTS, **kwargs: object) -> Trace:
    """A line of at most `points` points, drawn as SVG (no WebGL context per chart)."""
    xs, ys = envelope(np.asarray(x), np.asarray(y, dtype=float), points)
    return {"type": "scatter", "x": xs, "y": ys, "mode": "lines", **kwargs}


def colour(i: int) -> str:
    return palette.run_colour(i)


LEGEND_WIDTH_PX = 440
"""The narrowest a chart is drawn: half the page at 1280 px beside the sidebar (two charts a row)."""
LEGEND_ROW_PX = 21


def legend_rows(traces: Sequence[Trace] | go.Figure, width_px: int = LEGEND_WIDTH_PX) -> int:
    """Rows a horizontal legend takes at `width_px`: entries laid left to right as Plotly does
    (symbol 40 px, then about 6.5 px a character), wrapping when the next does not fit."""
    rows, used = 0, width_px
    for trace in [t.to_plotly_json() for t in traces.data] if isinstance(traces, go.Figure) else traces:
        if trace.get("showlegend") is False or not trace.get("name"):
            continue
        entry = 40 + 6.5 * len(str(trace["name"]))
        if used + entry > width_px:
            rows, used = rows + 1, 0
        used += entry
    return rows


def _layout(traces: Sequence[Trace], title: str, *, xaxis_title: str | None = None, yaxis_title: str | None = None, **layout: Any) -> dict[str, Any]:
    """Title on top; the legend at the figure's bottom edge (`yref="container"`), below the x-axis
    title whatever the plot's height, so the two never overlap; the figure grows by the legend's
    rows, so a long legend does not squash the plot (a 12-entry legend did at 1280 px). `layout`:
    the figure's other layout entries (`xaxis`, `yaxis`... as dicts), the axis titles set in them."""
    bottom = 50 + LEGEND_ROW_PX * max(2, legend_rows(traces))
    for axis, text in (("xaxis", xaxis_title), ("yaxis", yaxis_title)):
        layout[axis] = {"ticklabeloverflow": "allow", **layout.get(axis, {})}  # no measuring of every label against the page: the margins hold them
        if text is not None:
            layout[axis] = {**layout[axis], "title": {"text": text}}
    return {**layout, "title": {"text": title}, "margin": {"l": 10, "r": 10, "t": 64, "b": bottom}, "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0}, "height": 310 + bottom}


X_AXES = {"step": "step", "wall": "time since start (s)"}
"""Step-time x-axes: the step's index, or when it started in seconds since the run started."""


def step_times(series: Sequence[tuple[str, pd.DataFrame]], *, log: bool = True, x: str = "step") -> go.Figure:
    """Step time over steps (or over wall-clock time, `x="wall"`), one line per run; warm-up steps
    marked. Log scale by default: a compiling first step is 100x a steady one. Ticks in µs/ms/s.
    A run whose loop runs ahead of the device is drawn as its device pace (its step time), with its
    iterations, mostly dispatches, as a faint dotted line beside it."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: one of {', '.join(X_AXES)}")
    column = "step" if x == "step" else "t_s"
    traces: list[Trace] = []
    shade: tuple[float, float] | None = None
    drawn: list[np.ndarray] = []
    for i, (label, steps) in enumerate(series):
        if steps.empty:
            continue
        paced = steps[steps["pace_s"].notna()] if "pace_s" in steps else steps.iloc[:0]
        if paced.empty:
            traces.append(_line(steps[column], steps["duration_s"] * 1e3, name=label, line={"color": colour(i)}, legendgroup=label))
        else:  # the loop runs ahead: its step time is the device's pace; its iterations are mostly dispatches
            traces.append(_line(paced[column], paced["pace_s"] * 1e3, name=f"{label} · device pace", line={"color": colour(i)}, legendgroup=label))
            traces.append(_line(steps[column], steps["duration_s"] * 1e3, name=f"{label} · iterations (the loop runs ahead: mostly dispatches)", line={"color": colour(i), "width": 1, "dash": "dot"}, opacity=0.5, legendgroup=label))
            drawn.append(paced["pace_s"].to_numpy(dtype=float) * 1e3)
        drawn.append(steps["duration_s"].to_numpy(dtype=float) * 1e3)
        warm = steps[steps["phase"] == "warm-up"]
        if not warm.empty:
            traces.append({"type": "scatter", "x": _array(warm[column]), "y": _array(warm["duration_s"] * 1e3), "mode": "markers", "name": f"{label} · warm-up", "marker": {"color": colour(i), "symbol": "x", "size": 10}, "legendgroup": label})
            if x == "step":
                span = (-0.5, len(warm) - 0.5)
            else:
                span = (float(warm["t_s"].min()), float((warm["t_s"] + warm["duration_s"]).max()))
            shade = span if shade is None else (min(shade[0], span[0]), max(shade[1], span[1]))
    layout: dict[str, Any] = {}
    if shade is not None and all(math.isfinite(v) for v in shade):  # the warm-up shaded, its label above the plot, clear of the markers
        layout["shapes"] = [{"type": "rect", "x0": shade[0], "x1": shade[1], "xref": "x", "y0": 0, "y1": 1, "yref": "y domain", "fillcolor": "grey", "opacity": 0.15, "line": {"width": 0}}]
        layout["annotations"] = [{"text": "warm-up", "showarrow": False, "x": shade[0], "xanchor": "right", "xref": "x", "y": 1, "yanchor": "top", "yref": "y domain"}]
    values = np.concatenate(drawn) if drawn else np.empty(0)
    values = values[values > 0]  # NaN is not > 0 either
    if log:
        ticks = log_ticks(float(values.min()), float(values.max())) if values.size else []
        layout["yaxis"] = {"type": "log"}
    else:
        ticks = linear_ticks(0.0, float(values.max())) if values.size else []
        layout["yaxis"] = {"type": "linear", "rangemode": "tozero"}
    if ticks:
        layout["yaxis"].update(tickvals=ticks, ticktext=[_ms(t) for t in ticks])
    title = "Step time over steps" if x == "step" else "Step time over time"
    return plain_figure(traces, _layout(traces, title, xaxis_title=X_AXES[x], yaxis_title="step time (log)" if log else "step time", **layout))


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


def box_stats(values: np.ndarray) -> dict[str, float]:
    """What a box plot draws, computed here so the browser gets five numbers, not every step:
    quartiles by linear interpolation (Plotly's `quartilemethod="linear"`), the mean, and whiskers
    at the furthest values within 1.5 IQR of the box (Tukey), as Plotly computes them itself."""
    v = np.sort(np.asarray(values, dtype=float)[~np.isnan(values)])
    q1, median, q3 = (float(q) for q in np.percentile(v, [25, 50, 75]))
    iqr = q3 - q1
    return {"q1": q1, "median": median, "q3": q3, "mean": float(v.mean()), "lowerfence": float(v[v >= q1 - 1.5 * iqr].min()), "upperfence": float(v[v <= q3 + 1.5 * iqr].max())}


def steady_step_times(steps: pd.DataFrame) -> np.ndarray:
    """A run's steady step times in seconds (a `step_phases` frame): the device's pace at each step
    where the loop runs ahead of the device, else the steady iterations."""
    if "pace_s" in steps and steps["pace_s"].notna().any():
        return steps["pace_s"].dropna().to_numpy(dtype=float)
    return steps.loc[steps["phase"] == "steady", "duration_s"].to_numpy(dtype=float)


def step_distribution(series: Sequence[tuple[str, np.ndarray]]) -> go.Figure:
    """Steady-state step times as box plots (median, quartiles, whiskers, mean dashed), one per run,
    each with its step count; a run with too few steady steps for quartiles shows its steps as points."""
    traces: list[Trace] = []
    for i, (label, durations_s) in enumerate(series):
        values = np.asarray(durations_s, dtype=float) * 1e3
        values = values[~np.isnan(values)]
        at = f"{short_name(label, 16)}<br>{len(values)} steps"  # the sample under every box, said on the axis
        if len(values) >= MIN_STEADY_STEPS:  # the count under which the headline leaves the steady median too
            stats = box_stats(values)
            traces.append({"type": "box", "x": [at], "name": f"{label} ({len(values)} steady steps)", "marker": {"color": colour(i)}, "boxpoints": False, **{k: [v] for k, v in stats.items()}})
        elif len(values):  # quartiles of 3 steps would be made up: the steps themselves
            traces.append({"type": "scatter", "x": [at] * len(values), "y": values, "mode": "markers", "name": f"{label}: {len(values)} steady steps, too few for a box", "showlegend": True, "marker": {"color": colour(i), "size": 9}})
    xaxis = {"tickangle": 0, "automargin": True}  # labels level, long names shortened in the middle (full in the legend and on hover)
    return plain_figure(traces, _layout(traces, "Steady-state step time distribution", yaxis_title="step time (ms)", xaxis=xaxis))


def memory_timeline(series: Sequence[tuple[str, pd.DataFrame]], *, title: str = "Device memory in use") -> go.Figure:
    """Memory in use over time since each run started, one line per run and device."""
    traces: list[Trace] = []
    lines = sum(samples["device"].nunique() for _, samples in series if not samples.empty)
    points = max(200, min(LINE_POINTS, CHART_POINTS // max(1, lines)))
    for i, (label, samples) in enumerate(series):
        for j, (device, rows) in enumerate(samples.groupby("device", sort=True)):
            traces.append(_line(rows["t_s"], rows["bytes_in_use"].astype(float) / MIB, points=points, name=f"{label} · {device}", line={"color": colour(i), "dash": ["solid", "dot", "dash", "dashdot"][j % 4]}))
    return plain_figure(traces, _layout(traces, title, xaxis_title="time since start (s)", yaxis_title="in use (MiB)"))


def memory_band(series: Sequence[tuple[str, pd.DataFrame]], *, title: str = "Device memory in use (highest device, band down to the lowest)") -> go.Figure:
    """Per run, the device with the most memory in use over time, and a band down to the one with
    the least: runs of 8 devices stay readable side by side (the run page has a line per device)."""
    traces: list[Trace] = []
    for i, (label, samples) in enumerate(series):
        if samples.empty:
            continue
        devices = samples["device"].nunique()
        t = samples["t_s"].to_numpy(dtype=float)
        edges = np.linspace(t.min(), t.max(), min(LINE_POINTS // 2, len(t)) + 1)
        bucket = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
        grouped = pd.DataFrame({"b": bucket, "t": t, "v": samples["bytes_in_use"].to_numpy(dtype=float) / MIB}).groupby("b")
        band = pd.DataFrame({"t": grouped["t"].mean(), "low": grouped["v"].min(), "high": grouped["v"].max()})
        if devices > 1:
            traces.append({"type": "scatter", "x": _array(band["t"]), "y": _array(band["low"]), "mode": "lines", "line": {"width": 0, "color": colour(i)}, "showlegend": False, "legendgroup": label, "hoverinfo": "skip"})
        fill = {"fill": "tonexty", "fillcolor": _faint(colour(i))} if devices > 1 else {}
        name = f"{label} · highest of {devices} devices" if devices > 1 else f"{label} · {samples['device'].iloc[0]}"
        traces.append({"type": "scatter", "x": _array(band["t"]), "y": _array(band["high"]), "mode": "lines", "name": name, "line": {"color": colour(i)}, "legendgroup": label, **fill})
    return plain_figure(traces, _layout(traces, title, xaxis_title="time since start (s)", yaxis_title="in use (MiB)"))


def _faint(hex_colour: str, alpha: float = 0.2) -> str:
    r, g, b = (int(hex_colour[k : k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


HEATMAP_COLOURS = [[i / (len(plotly.colors.sequential.Viridis) - 1), c] for i, c in enumerate(plotly.colors.sequential.Viridis)]
"""Plotly's "Viridis" as its checks spell a named colour scale out (stops at i / (n - 1))."""
HEATMAP_COLUMNS = 600
"""Most step columns a heatmap draws; longer runs show the slowest step of each stretch of steps."""


def hosts_heatmap(frame: pd.DataFrame, value: str = "duration_s") -> go.Figure:
    """Hosts x steps: one row per process, one column per step, colour the step's time (ms).
    `frame` is `analyzers.hosts.steps_by_host` (`value`: `duration_s`, the iteration, or `own_s`,
    the iteration minus the time blocked in syncs). A straggler is a row that is darker all along;
    a slow step on one host only is a dark cell. Past `HEATMAP_COLUMNS` steps a column is the
    slowest step of its stretch, so no spike is averaged away."""
    if value not in ("duration_s", "own_s"):
        raise ValueError(f"value={value!r}: one of duration_s, own_s")
    grid = frame.pivot_table(index="process_index", columns="index", values=value, aggfunc="first").sort_index()
    names = frame.drop_duplicates("process_index").set_index("process_index")["hostname"]
    rows = [f"process {int(p)}" + (f" · {names.get(p)}" if isinstance(names.get(p), str) else "") for p in grid.index]
    z = grid.to_numpy(dtype=float) * 1e3
    steps = grid.columns.to_numpy()
    per = 1
    if z.shape[1] > HEATMAP_COLUMNS:
        per = math.ceil(z.shape[1] / HEATMAP_COLUMNS)
        pad = per * math.ceil(z.shape[1] / per) - z.shape[1]
        padded = np.pad(z, ((0, 0), (0, pad)), constant_values=np.nan)
        with np.errstate(all="ignore"):
            z = np.nanmax(padded.reshape(z.shape[0], -1, per), axis=2)
        steps = steps[::per]
    what = "iteration" if value == "duration_s" else "own work (iteration − waits)"
    step_text = "step %{x}" if per == 1 else f"steps %{{x}}–%{{x}}+{per - 1} (slowest)"
    traces = [{"type": "heatmap", "z": z, "x": _array(steps), "y": rows, "colorscale": HEATMAP_COLOURS, "reversescale": True, "colorbar": {"title": {"text": "ms"}}, "hovertemplate": f"%{{y}}<br>{step_text}<br>{what}: %{{z:.2f}} ms<extra></extra>"}]
    layout = _layout(traces, f"Hosts × steps: {what} per step", xaxis_title="step", yaxis_title="", yaxis={"autorange": "reversed", "type": "category"})
    return plain_figure(traces, {**layout, "height": max(240, 80 + 36 * len(rows))})


def top_ops(table: pd.DataFrame, labels: Sequence[str]) -> go.Figure:
    """Grouped horizontal bars of each op's time per step per device in each run (ms); names
    shortened on the axis, the full names on hover. `table` is `ops_compare.ops_side_by_side`."""
    traces: list[Trace] = []
    full = [str(i) for i in table.index]
    short = [short_name(i, 40) for i in full]
    names = table["ops"].astype(str).tolist() if "ops" in table else full
    for i, label in enumerate(labels):
        if label in table:
            share = table.get(f"{label} % of step", pd.Series([float("nan")] * len(table), index=table.index)).astype(float) * 100
            traces.append({
                "type": "bar", "y": short, "x": _array(table[label].astype(float) * 1e3), "name": label, "orientation": "h", "marker": {"color": colour(i)},
                "customdata": [list(row) for row in zip(full, names, share.round(1), strict=True)],
                "hovertemplate": "%{customdata[0]}<br>%{x:.3f} ms per step per device (%{customdata[2]} % of step)<br>%{customdata[1]}<extra>" + label + "</extra>",
            })  # fmt: skip
    layout = _layout(traces, "Top ops: time per step per device", xaxis_title="ms per step per device", barmode="group", yaxis={"autorange": "reversed"})
    return plain_figure(traces, {**layout, "height": max(360, 28 * len(table) * max(1, len(labels)))})


def fusion_bars(by_kind: Mapping[str, Mapping[str, int]], runs: Sequence[str] | None = None) -> go.Figure:
    """Fusions of the step program by kind (kLoop, kInput, kOutput, kCustom...), grouped by run;
    each run coloured by its position in `runs` (the selection), which may hold runs not drawn."""
    kinds = sorted({k for counts in by_kind.values() for k in counts})
    colours = palette.run_colours(runs or list(by_kind))
    traces = [{"type": "bar", "x": kinds, "y": [counts.get(k, 0) for k in kinds], "name": label, "marker": {"color": colours.get(label, palette.OTHER_PART)}} for label, counts in by_kind.items()]
    return plain_figure(traces, _layout(traces, "Fusions by kind (step program)", yaxis_title="fusions", barmode="group"))
