"""Step-time breakdown from the trace timeline: where each step's wall time went.

Windows are the recorder's steps: one per traced step, from its iteration start to the next one's
(the steps table, on the recorder's epoch clock), mapped onto the trace clock by the trace's own
time zero (`trace_clock.zero_s` in run.json, XSpace `profile_start_time`) and then checked against
the trace: no program can start before it was dispatched, so the smallest lag from a step's start
to the next program start on a device is measured; a negative one (the clocks disagree) shifts the
windows back by it, and its size is reported as the alignment error. Step marks inside the trace
(annotations, device step lines) frame the windows only where the run has no recorder steps
(imported traces); without either, the whole trace is one window and only shares are given.

Per window and device lane, every instant gets exactly one label by a sweep line over the
timeline's intervals, in priority order: collectives, matmul/convolution, data movement, other
compute; else, with no device op running, device idle inside a program, compile, input pipeline,
or host time between device programs. So the parts sum to the window. Op classes come from the
optimized HLO where the run saved it (`tpu_perf.analyzers.op_classes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.analyzers.op_classes import reclassify, run_op_classes
from tpu_perf.analyzers.ready import ready_times
from tpu_perf.analyzers.steps import ran_ahead
from tpu_perf.store import Run
from tpu_perf.traces.intervals import coverage
from tpu_perf.traces.tables import OP_CLASSES

PARTS = (*OP_CLASSES, "device_idle", "compile", "input", "host")
"""Breakdown parts; `host` is time between device programs not explained by compile or input."""

ALIGN_SLACK_S = 0.001
"""How far before a step's mapped start a program may start and still count as its first program
when the offset is measured: the two clocks are the same machine's wall clock, read microseconds
apart; a wider slack would take the previous step's program for this one's."""

QUEUED = 0.5
"""Recorder windows do not frame the device's work when the recorder saw the device busy for most
of the traced iterations but the trace holds under this share of that work inside them: the host
queued the traced steps far ahead (dispatch without back-pressure) and the device ran them after
their iterations. The breakdown then falls back to the whole trace (shares only)."""

LONG_HOST_S = 0.001
"""A stretch of host time (no op on the lane, no input or compile event) at least this long is the
loop's own work, not a framework's: eager PyTorch on a CPU leaves microseconds between its ops (its
Python dispatch, autograd), while a batch made in numpy, a plain generator or a wait on storage
leaves one gap of milliseconds (tests/torch_scripts/input_loop.py). Per window: `long_host_s`."""

AGREE = 0.25
"""Trace step marks agree with the recorder's steps when as many and their median length is within this."""


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    per_step: pd.DataFrame
    """One row per (lane, step): `step_s`, seconds per part, `long_host_s` and `core_wait_s` (the
    seconds the step's thread waited for a CPU core; NaN where unknown); empty when there are no
    per-step windows."""
    fractions: dict[str, float]
    """Share of all window time per part (sums to 1); empty when the run has no trace timeline."""
    window: str
    """`steps` (one window per step), `trace` (the whole capture: shares only, nothing per step) or `none`."""
    steps_from: str | None = None
    """`recorder` (the recorder's traced steps) or `trace` (the trace's own step marks) for `steps` windows."""
    alignment_error_s: float | None = None
    """`steps` windows: the smallest start-to-program lag left after alignment (how far off the
    mapping can be when one step's program started at once); None otherwise."""
    clock_offset_s: float | None = None
    """Seconds added to a recorder time to get the trace time (`steps` windows)."""
    annotations_agree: bool | None = None
    """Whether the trace's own step marks agree with the recorder's steps; None without both."""
    device_check: dict[str, float | None] | None = None
    """`steps` windows: the recorder's device time against the trace's (the union of the step's device
    ops, mean over lanes) over the traced steps: `recorded_median_s`, `trace_median_s`, `difference_median_s`."""
    trace_steps: float | None = None
    """Steps whose device work the whole trace holds (recorder windows): more than the traced steps
    where the trace stayed open while queued steps ran (the recorder holds it for the traced work);
    what a per-step op total divides by. None where the windows give no program to count."""


def _device_lanes(tl: pd.DataFrame) -> list[str]:
    return [ln for ln in tl["lane"].unique() if not str(ln).endswith("host")]


def _recorder_windows(run: Run, tl: pd.DataFrame) -> tuple[pd.DataFrame, str, float, float | None] | None:
    """Traced steps on the trace clock, where they were framed (`recorder`: the iterations;
    `device`: where the device ran them, when the host ran ahead), the offset used, and the
    alignment error."""
    zero = (run.manifest.get("trace_clock") or {}).get("zero_s")
    steps = run.table("steps")
    if zero is None or steps.empty or "traced" not in steps:
        return None
    traced = steps[steps["traced"].fillna(False).astype(bool)]
    if traced.empty:
        return None
    offset = -float(zero)
    if ran_ahead(traced, slack_s=ALIGN_SLACK_S):
        device = _device_windows(traced, tl, offset)
        if device is not None:
            return device[0], "device", offset, device[1]
    starts = traced["start_time_s"].to_numpy(float) + offset
    on_device = tl["lane"].isin(_device_lanes(tl))
    progs = np.sort(tl.loc[(tl["kind"] == "program") & on_device, "start_s"].to_numpy(float))
    if not progs.size:  # no program events (Kineto): a step's first device op starts no earlier than its step
        progs = np.sort(tl.loc[tl["kind"].isin(OP_CLASSES) & on_device, "start_s"].to_numpy(float))
    error = None
    if progs.size:
        idx = np.searchsorted(progs, starts - ALIGN_SLACK_S)
        lags = np.array([progs[i] - s for i, s in zip(idx, starts, strict=True) if i < progs.size])
        lags = lags[np.isfinite(lags)]
        if lags.size:
            shift = min(0.0, float(lags.min()))
            offset += shift
            error = abs(float(lags.min()))
    frame = pd.DataFrame({
        "device": None, "step": traced["step"].to_numpy(int),
        "start_s": traced["start_time_s"].to_numpy(float) + offset, "end_s": traced["end_time_s"].to_numpy(float) + offset,
    })
    return frame, "recorder", offset, error


def _lane_executions(progs: pd.DataFrame, dispatch: np.ndarray, ready: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, float] | None:
    """One lane's executions of the step program, and which one ran the first traced step: the
    traced steps ran in dispatch order (FIFO), each starting after its dispatch, so the offset is
    the one whose program ends lie nearest before the watcher's ready stamps. Returns (starts,
    ends, index of the first traced step's execution, median ready - program end)."""
    known = ~np.isnan(ready)
    names = []
    for d, r in zip(dispatch[known], ready[known], strict=True):  # the program each ready stamp closes
        fit = progs[(progs["end_s"] <= r + ALIGN_SLACK_S) & (progs["start_s"] >= d - ALIGN_SLACK_S)]
        if not fit.empty:
            names.append(fit.loc[fit["end_s"].idxmax(), "name"])
    if not names:
        return None
    runs = progs[progs["name"] == pd.Series(names).mode().iloc[0]].sort_values("start_s")
    starts, ends = runs["start_s"].to_numpy(float), runs["end_s"].to_numpy(float)
    n, best = len(dispatch), None
    for j0 in range(len(starts) - n + 1):
        lag = (ready - ends[j0:j0 + n])[known]
        lag = lag[np.isfinite(lag)]  # a program the trace cut has no end
        if not lag.size or (starts[j0:j0 + n] < dispatch - ALIGN_SLACK_S).any() or (lag < -ALIGN_SLACK_S).any():
            continue  # a program cannot start before its dispatch, nor be seen ready before it ends
        if best is None or float(np.median(lag)) < best[1]:
            best = (j0, float(np.median(lag)))
    return None if best is None else (starts, ends, best[0], best[1])


def _device_windows(traced: pd.DataFrame, tl: pd.DataFrame, offset: float) -> tuple[pd.DataFrame, float] | None:
    """Traced steps framed where the device ran them (XProf's device step: from a step's program
    start to the next step's program start; the last traced one to the next execution's start, or
    its own end when the trace stops first), per device lane; and the median gap between the
    watcher's ready stamps and the matched program ends (the alignment error; the largest over lanes)."""
    dispatch = traced["start_time_s"].to_numpy(float) + offset
    ready = pd.to_numeric(traced["ready_time_s"], errors="coerce").to_numpy(float) + offset
    progs = tl[(tl["kind"] == "program") & tl["lane"].isin(_device_lanes(tl))]
    frames, errors = [], []
    for lane, lane_progs in progs.groupby("lane", observed=True):
        found = _lane_executions(lane_progs, dispatch, ready)
        if found is None:
            return None
        starts, ends, j0, error = found
        n = len(dispatch)
        nxt = np.array([starts[j] if j < len(starts) else ends[j - 1] for j in range(j0 + 1, j0 + n + 1)])
        frames.append(pd.DataFrame({"device": lane, "step": traced["step"].to_numpy(int), "start_s": starts[j0:j0 + n], "end_s": nxt}))
        errors.append(abs(error))  # a median lag may fall just below zero (within ALIGN_SLACK_S)
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True), float(max(errors))


def _agree(marks: pd.DataFrame, windows: pd.DataFrame) -> bool:
    per_lane = marks.groupby("device").size()
    if per_lane.empty or int(per_lane.max()) != len(windows):
        return False
    got = float(pd.to_numeric(marks["end_s"] - marks["start_s"]).median())
    want = float((windows["end_s"] - windows["start_s"]).median())
    return want > 0 and abs(got - want) <= AGREE * want


def _device_check(run: Run, per_step: pd.DataFrame, *, ready_to_ready: bool = False) -> dict[str, float | None] | None:
    """The recorder's device time per traced step against the trace's. `ready_to_ready` (the host
    ran ahead): the recorder's is from the previous step's outputs ready (or this step's dispatch,
    when later) to this step's, the device's time on it, not its busy time inside the iteration."""
    steps = run.table("steps")
    if per_step.empty or "device_s" not in steps:
        return None
    trace = per_step.assign(busy=per_step[list(OP_CLASSES)].sum(axis=1)).groupby("step")["busy"].mean()
    if ready_to_ready:
        by_step = steps.set_index("step")
        ready = pd.Series(ready_times(steps), index=by_step.index)
        began = np.fmax(ready.shift(1).to_numpy(float), by_step["start_time_s"].to_numpy(float))
        recorded = pd.Series(ready.to_numpy(float) - began, index=by_step.index).reindex(trace.index)
    else:
        recorded = pd.to_numeric(steps.set_index("step")["device_s"], errors="coerce").reindex(trace.index)
    both = recorded.notna()
    diff = (recorded[both] - trace[both])
    return {
        "recorded_median_s": float(recorded[both].median()) if both.any() else None,
        "trace_median_s": float(trace.median()),
        "difference_median_s": float(diff.median()) if both.any() else None,
    }


def _label_window(lane_ev: pd.DataFrame, host_ev: pd.DataFrame, start: float, end: float, seen_from: float) -> dict[str, float]:
    """Seconds per part of one window, and `long_host_s`: NaN (unknown) for a window that began
    before `seen_from`, the trace's first event (the profiler was starting there: a stretch with
    nothing in it is not the loop's work)."""
    ev = pd.concat([lane_ev, host_ev])
    ev = ev[(ev["end_s"] > start) & (ev["start_s"] < end)]
    s, e = ev["start_s"].clip(start, end).to_numpy(float), ev["end_s"].clip(start, end).to_numpy(float)
    bounds = np.unique(np.concatenate([[start, end], s, e]))
    seg = np.diff(bounds)
    labels = np.full(len(seg), "host", dtype=object)
    for kind in reversed(("program", "input", "compile")):  # lower priority first, overwritten later
        m = (ev["kind"] == kind).to_numpy()
        cov = coverage(bounds, s[m], e[m])
        labels[cov > 0] = "device_idle" if kind == "program" else kind
    for kind in reversed(OP_CLASSES):
        m = (ev["kind"] == kind).to_numpy()
        labels[coverage(bounds, s[m], e[m]) > 0] = kind
    return {**{p: float(seg[labels == p].sum()) for p in PARTS}, "long_host_s": _long_runs(seg, labels == "host") if start >= seen_from else float("nan")}


def _long_runs(seg: np.ndarray, host: np.ndarray) -> float:
    """Seconds in runs of consecutive host segments at least LONG_HOST_S long (the segments tile the window)."""
    if not host.any():
        return 0.0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], host.astype(np.int8), [0]])))
    csum = np.concatenate([[0.0], np.cumsum(seg)])
    runs = csum[edges[1::2]] - csum[edges[::2]]
    return float(runs[runs >= LONG_HOST_S].sum())


def classified_timeline(run: Run) -> pd.DataFrame:
    """The run's timeline with device op classes from its optimized HLO where it saved it."""
    def derive(r: Run) -> pd.DataFrame:
        tl = r.table("timeline")
        classes = run_op_classes(r)
        if tl.empty or not classes:
            return tl
        ops = tl["kind"].isin(OP_CLASSES)
        tl = tl.copy()
        tl.loc[ops, "kind"] = reclassify(classes, tl.loc[ops, "name"], tl.loc[ops, "kind"].astype(object))
        return tl

    return run.derived("classified_timeline", derive)


def trace_steps(tl: pd.DataFrame, windows: pd.DataFrame) -> float | None:
    """Steps whose device work the trace holds: per device lane, the traced steps scaled by how many
    times the program that ran longest inside their windows ran in the whole trace against inside
    them (a helper called k times a step scales the same), the median over lanes. A run-ahead
    loop's trace, held open while its traced work ran, holds several more steps' programs
    (examples/jax_mlp.py: 18 runs of the step program for 3 traced steps)."""
    progs = tl[tl["kind"] == "program"]
    counts = []
    for lane in _device_lanes(tl):
        own = windows[windows["device"] == lane] if (windows["device"] == lane).any() else windows.drop_duplicates("step")
        lane_progs = progs[progs["lane"] == lane]
        if own.empty or lane_progs.empty:
            continue
        starts = lane_progs["start_s"].to_numpy(float)
        inside = np.zeros(len(lane_progs), dtype=bool)
        for w in own.itertuples(index=False):
            inside |= (starts >= float(w.start_s)) & (starts < float(w.end_s))
        if not inside.any():
            continue
        framed = lane_progs[inside]
        main = (framed["end_s"] - framed["start_s"]).groupby(framed["name"], observed=True).sum().idxmax()
        counts.append(len(own) * int((lane_progs["name"] == main).sum()) / int((framed["name"] == main).sum()))
    return float(np.median(counts)) if counts else None


def analyze_windows(tl: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """One row per (device lane, window): `step_s`, seconds per part, and `long_host_s` (the part of
    `host` in stretches of at least LONG_HOST_S)."""
    host = tl[tl["kind"].isin(["compile", "input"])]
    seen_from = float(tl.loc[tl["kind"] != "step", "start_s"].min()) if len(tl) else 0.0
    rows = []
    for lane in _device_lanes(tl):
        lane_ev = tl[(tl["lane"] == lane) & tl["kind"].isin([*OP_CLASSES, "program"])]
        own = windows[windows["device"] == lane] if (windows["device"] == lane).any() else windows.drop_duplicates("step")
        for w in own.itertuples(index=False):
            parts = _label_window(lane_ev, host, float(w.start_s), float(w.end_s), seen_from)
            rows.append({"lane": lane, "step": int(w.step), "step_s": float(w.end_s - w.start_s), **parts})
    return pd.DataFrame(rows, columns=["lane", "step", "step_s", *PARTS, "long_host_s"])


def _core_waits(run: Run, per_step: pd.DataFrame) -> np.ndarray:
    """Each window's `core_wait_s`: the seconds its step's thread waited for a CPU core
    (collectors.core_wait), where the recorder read it; NaN elsewhere."""
    steps = run.table("steps")
    if "core_wait_s" not in steps or per_step.empty:
        return np.full(len(per_step), np.nan)
    traced = steps[steps["traced"].fillna(False).astype(bool)].drop_duplicates("step", keep="last")
    waits = pd.to_numeric(traced["core_wait_s"], errors="coerce").set_axis(traced["step"].to_numpy(int))
    return waits.reindex(per_step["step"].to_numpy(int)).to_numpy(dtype=float)


def analyze_breakdown(run: Run) -> Breakdown:
    """Breakdown per window for every device lane of the trace timeline."""
    tl = classified_timeline(run)
    empty = pd.DataFrame(columns=["lane", "step", "step_s", *PARTS, "long_host_s", "core_wait_s"])
    if tl.empty:
        return Breakdown(per_step=empty, fractions={}, window="none")
    marks = run.table("device_steps")
    recorded = _recorder_windows(run, tl)
    offset = error = agree = source = None
    if recorded is not None:
        windows, source, offset, error = recorded
        how = "steps"
        agree = _agree(marks, windows) if not marks.empty else None
    elif not marks.empty:
        windows, how, source = marks[["device", "step", "start_s", "end_s"]].reset_index(drop=True), "steps", "trace"
    else:
        span = tl[tl["kind"] != "step"]
        windows, how = pd.DataFrame({"device": [None], "step": [0], "start_s": [span["start_s"].min()], "end_s": [span["end_s"].max()]}), "trace"
    per_step = analyze_windows(tl, windows)
    per_step["core_wait_s"] = _core_waits(run, per_step) if source == "recorder" else np.nan
    total = per_step["step_s"].sum()
    fractions = {p: float(per_step[p].sum() / total) for p in PARTS} if total > 0 else {}
    check = _device_check(run, per_step, ready_to_ready=source == "device") if source in ("recorder", "device") else None
    if source == "recorder" and check and check["recorded_median_s"] and check["trace_median_s"] < QUEUED * check["recorded_median_s"]:
        span = tl[tl["kind"] != "step"]
        whole = analyze_windows(tl, pd.DataFrame({"device": [None], "step": [0], "start_s": [span["start_s"].min()], "end_s": [span["end_s"].max()]}))
        total = whole["step_s"].sum()
        fractions = {p: float(whole[p].sum() / total) for p in PARTS} if total > 0 else {}
        return Breakdown(per_step=empty, fractions=fractions, window="trace", alignment_error_s=error, clock_offset_s=offset, annotations_agree=agree, device_check=check)
    return Breakdown(
        device_check=check,
        per_step=per_step if how != "trace" else empty, fractions=fractions, window=how, steps_from=source,
        alignment_error_s=error, clock_offset_s=offset, annotations_agree=agree,
        trace_steps=trace_steps(tl, windows) if source in ("recorder", "device") else None,
    )
