"""Runtime samples as timelines: the best source per device, samples joined to steps, gaps.

Shared by the memory and runtime analyzers. Pure functions of tables; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.analyzers.steps import run_steps
from tpu_perf.store import Run

SOURCE_RANK = {"libtpu": 0, "nvml": 1, "jax.memory_stats": 2, "torch.accelerator": 3}
"""Per device, rows of the best source present are used: libtpu and NVML see all device memory,
the frameworks' allocator stats only their own allocations (the sampler's order, by row source)."""

GAP_FACTOR = 2.5
"""A pause between two samples of a source longer than this many intervals is a gap."""


def best_source_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Device rows (not `host`) of each device's best source, sorted by time."""
    if table.empty or "device" not in table:
        return table
    best = best_source_positions(table)
    return table.take(best.positions).reset_index(drop=True) if best.positions.size else table.iloc[0:0]


@dataclass(frozen=True)
class BestRows:
    """Where `best_source_rows` takes its rows from, for analyzers that need a few columns of them."""

    positions: np.ndarray
    """Row positions in the table, in the order of `best_source_rows`."""
    device_codes: np.ndarray
    """Per row of the whole table, its device's index in `devices` (-1: none)."""
    devices: pd.Index


def best_source_positions(table: pd.DataFrame) -> BestRows:
    """`best_source_rows` as positions. Ranks are taken per distinct device and source (a handful),
    not per row, and nothing is copied: these tables hold a row per device and sample."""
    devices, device_names = pd.factorize(table["device"])
    valid = (devices >= 0) & (devices != _code_of(device_names, "host"))  # a row without a device belongs to none
    if not valid.any():
        return BestRows(positions=np.empty(0, dtype=np.intp), device_codes=devices, devices=pd.Index(device_names))
    sources, source_names = pd.factorize(table["source"])
    rank = np.array([SOURCE_RANK.get(s, len(SOURCE_RANK)) for s in source_names] + [len(SOURCE_RANK)])[sources]
    best = np.full(len(device_names), len(SOURCE_RANK) + 1)
    np.minimum.at(best, devices[valid], rank[valid])
    kept = np.flatnonzero(valid & (rank == best[devices]))
    return BestRows(positions=kept[_time_order(table["time_s"].to_numpy()[kept])], device_codes=devices, devices=pd.Index(device_names))


def _code_of(names: Any, value: str) -> int:
    where = np.flatnonzero(np.asarray(names == value))
    return int(where[0]) if where.size else -2


def _time_order(times: np.ndarray) -> np.ndarray:
    """The order `DataFrame.sort_values` gives (its default quicksort on the values, NaN last), so
    that rows with equal times come out as they always have."""
    if times.dtype.kind != "f":
        return pd.Series(times).sort_values().index.to_numpy()
    nan = np.isnan(times)
    index = np.arange(len(times))
    return np.concatenate([index[~nan][times[~nan].argsort(kind="quicksort")], index[nan]])


def best_rows(run: Run, table: str) -> pd.DataFrame:
    """`best_source_rows` of one of the run's tables (without its list columns: `Run.scalar_table`),
    derived once per loaded Run; read-only."""
    def rows(r: Run) -> pd.DataFrame:
        best, frame = best_positions(r, table), r.scalar_table(table)
        if best is None:
            return frame
        return frame.take(best.positions).reset_index(drop=True) if best.positions.size else frame.iloc[0:0]

    return run.derived(f"best_source_rows:{table}", rows)


def best_positions(run: Run, table: str) -> BestRows | None:
    """`best_source_positions` of one of the run's tables, once per loaded Run; None without device rows."""
    frame = run.scalar_table(table)
    if frame.empty or "device" not in frame:
        return None
    return run.derived(f"best_source_positions:{table}", lambda r: best_source_positions(frame))


def step_of(times: pd.Series, steps: pd.DataFrame) -> pd.Series:
    """Index of the step each time falls in: the last step started at or before it (-1: before any).

    A sample between two steps (input pipeline, logging) counts for the step before it: that is
    the step whose memory is still resident.
    """
    if steps.empty:
        return pd.Series(-1, index=times.index)
    starts = steps["start_time_s"].to_numpy(dtype=float)
    return pd.Series(np.searchsorted(starts, times.to_numpy(dtype=float), side="right") - 1, index=times.index)


def steady_window(run: Run) -> tuple[float, float] | None:
    """From the first step's start to the last step's end; None without steps."""
    steps = run_steps(run)
    if steps.empty:
        return None
    return float(steps["start_time_s"].min()), float(steps["end_time_s"].max())


def per_step(run: Run) -> pd.DataFrame:
    """Per step: peak device memory (max over devices) and mean duty cycle of the samples in it.

    Columns: step, start_time_s, end_time_s, hbm_peak_bytes, duty_cycle_pct, samples. A step
    shorter than the sampling interval often holds no sample: its values are NaN (unknown).
    """
    steps = run_steps(run)
    out = pd.DataFrame({"step": steps.get("step", pd.Series(range(len(steps)))), "start_time_s": steps.get("start_time_s"), "end_time_s": steps.get("end_time_s")})
    if steps.empty:
        return out.assign(hbm_peak_bytes=pd.Series(dtype=float), duty_cycle_pct=pd.Series(dtype=float), samples=pd.Series(dtype=int))
    memory = best_rows(run, "memory")
    runtime = best_rows(run, "runtime")
    out["hbm_peak_bytes"] = np.nan
    out["duty_cycle_pct"] = np.nan
    out["samples"] = 0
    if not memory.empty:
        usage = memory[["bytes_in_use", "peak_bytes"]].astype(float).max(axis=1)
        by_step = usage.groupby(step_of(memory["time_s"], steps)).max()
        by_step = by_step[by_step.index >= 0]
        out.loc[by_step.index, "hbm_peak_bytes"] = by_step.to_numpy()
        counts = memory.groupby(step_of(memory["time_s"], steps))["time_s"].nunique()
        counts = counts[counts.index >= 0]
        out.loc[counts.index, "samples"] = counts.to_numpy()
    if not runtime.empty and "duty_cycle_pct" in runtime:
        duty = runtime.dropna(subset=["duty_cycle_pct"])
        mean = duty["duty_cycle_pct"].astype(float).groupby(step_of(duty["time_s"], steps)).mean()
        mean = mean[mean.index >= 0]
        out.loc[mean.index, "duty_cycle_pct"] = mean.to_numpy()
    return out


@dataclass(frozen=True, kw_only=True)
class Gap:
    """A span with no samples from a source that delivered before it (service died or stalled)."""

    source: str
    start_s: float
    """Time of the last sample before the gap."""
    end_s: float
    """Time of the first sample after it, or the end of the run."""
    detail: str | None


def gaps(run: Run) -> list[Gap]:
    """Gaps of each device source: from `unavailable` events, and from pauses > GAP_FACTOR intervals."""
    interval = float((run.manifest.get("config") or {}).get("sample_interval_s") or 1.0)
    events = run.table("sampler")
    stopped = events[events["event"] == "stopped"]["time_s"] if not events.empty else pd.Series(dtype=float)
    end = float(stopped.max()) if not stopped.empty else run.manifest.get("ended_at")
    frames = [t for t in (run.memory, run.scalar_table("runtime")) if not t.empty and "source" in t]
    if not frames:
        return []
    found: list[Gap] = []
    for source, times in _device_times_by_source(frames):
        pauses = np.flatnonzero(np.diff(times) > GAP_FACTOR * interval)
        details = {}
        if not events.empty:
            down = events[(events["source"] == source) & (events["event"] == "unavailable")]
            details = dict(zip(down["time_s"], down["detail"], strict=True))
        for i in pauses:
            found.append(Gap(source=str(source), start_s=float(times[i]), end_s=float(times[i + 1]), detail=_detail_between(details, times[i], times[i + 1])))
        last = float(times[-1])
        if end is not None and float(end) - last > GAP_FACTOR * interval:
            found.append(Gap(source=str(source), start_s=last, end_s=float(end), detail=_detail_between(details, last, float(end))))
    return sorted(found, key=lambda g: g.start_s)


def _device_times_by_source(frames: list[pd.DataFrame]) -> list[tuple[Any, np.ndarray]]:
    """(source, sorted distinct sample times of its device rows) over all frames, sources in order."""
    by_source: dict[Any, list[np.ndarray]] = {}
    for frame in frames:
        device = (frame["device"] != "host").to_numpy(dtype=bool)
        codes, names = pd.factorize(frame["source"][device])  # a row without a source belongs to none
        times = frame["time_s"].to_numpy(dtype=float)[device]
        for code, name in enumerate(names):
            by_source.setdefault(name, []).append(times[codes == code])
    return [(source, np.unique(np.concatenate(by_source[source]))) for source in sorted(by_source)]


def _detail_between(details: dict[float, str], start: float, end: float) -> str | None:
    return next((d for t, d in sorted(details.items()) if start <= t <= end), None)


WHOLE_RUN_NO_STEPS = "the whole run (it has no steps)"
WHOLE_RUN_NO_SAMPLE = "the whole run (no sample fell inside the steps)"


def rows_in(table: pd.DataFrame, window: tuple[float, float] | None) -> tuple[pd.DataFrame, str]:
    """Rows whose time falls in `window`, and the span they cover: "the steps", or one of the
    WHOLE_RUN_* phrases when there is no window or no row falls in it (all rows are then used,
    and the report says so)."""
    if window is None:
        return table, WHOLE_RUN_NO_STEPS
    if table.empty:
        return table, "the steps"
    inside = table[(table["time_s"] >= window[0]) & (table["time_s"] <= window[1])]
    return (inside, "the steps") if not inside.empty else (table, WHOLE_RUN_NO_SAMPLE)
