"""Runtime metrics over the run: duty cycle, HLO queue, execution-time percentiles, host CPU, gaps.

Execution-time percentiles come from the raw histogram buckets libtpu serves (cumulative since
the runtime started): the last snapshot minus the first one in the steps' window is the histogram
of the executions during the run, and a percentile is interpolated linearly inside its bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.analyzers.timeline import Gap, best_rows, gaps, rows_in, steady_window
from tpu_perf.store import Run

PERCENTILES = (50.0, 90.0, 99.0)


def histogram_percentile(counts: list[int] | np.ndarray, bounds: list[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile (0-100) of a bucketed distribution; None when it holds nothing.

    `bounds` are the finite boundaries: bucket 0 lies below bounds[0] (taken as starting at 0,
    these are durations), bucket i in [bounds[i-1], bounds[i]), the last above bounds[-1] (its
    percentile is reported as bounds[-1], a lower bound).
    """
    counts = np.asarray(counts, dtype=float)
    bounds = np.asarray(bounds, dtype=float)
    total = counts.sum()
    if total <= 0 or len(counts) != len(bounds) + 1:
        return None
    rank = q / 100.0 * total
    cumulative = np.cumsum(counts)
    i = int(np.searchsorted(cumulative, rank, side="left"))
    i = min(i, len(counts) - 1)
    if i == len(counts) - 1:
        return float(bounds[-1])
    lower = 0.0 if i == 0 else float(bounds[i - 1])
    upper = float(bounds[i])
    before = cumulative[i - 1] if i > 0 else 0.0
    fraction = (rank - before) / counts[i] if counts[i] else 0.0
    return lower + fraction * (upper - lower)


@dataclass(frozen=True, kw_only=True)
class DeviceRuntime:
    device: str
    source: str
    duty_cycle_pct: float | None
    """Mean over the samples within the steps' window."""
    hlo_queue_mean: float | None
    hlo_queue_max: int | None
    exec_count: int | None
    """HLO executions during the window (difference of the cumulative histogram)."""
    exec_p50_us: float | None
    exec_p90_us: float | None
    exec_p99_us: float | None


@dataclass(frozen=True, kw_only=True)
class RuntimeStats:
    duty_cycle_pct: float | None
    """Mean over devices and samples within the steps' window; None without a device source."""
    sources: list[str]
    samples: int
    """Sample times with device runtime rows."""
    per_device: list[DeviceRuntime]
    host_cpu_pct: float | None
    process_cpu_pct: float | None
    gaps: list[Gap]
    sampler_cpu_s: float | None
    """CPU time the sampler thread used in the whole run (its cost to the training process)."""
    samples_span: str | None = None
    """What the device figures cover: "the steps", or the whole run when no sample fell inside them."""


def _mean(series: pd.Series | None) -> float | None:
    if series is None:
        return None
    values = series.dropna().astype(float)
    return float(values.mean()) if not values.empty else None


def _present(value: Any) -> bool:
    return not pd.api.types.is_scalar(value) or not pd.isna(value)


def _first_last(values: np.ndarray) -> tuple[int, int] | None:
    """Positions of the first and the last snapshot present, looked for from each end: only these
    two count, and testing every row of a long run for NA is what made this slow."""
    first = next((i for i in range(len(values)) if _present(values[i])), None)
    if first is None:
        return None
    return first, next(i for i in range(len(values) - 1, first - 1, -1) if _present(values[i]))


def _exec_window(rows: pd.DataFrame) -> tuple[int | None, list[float | None]]:
    if "exec_bucket_counts" not in rows:
        return None, [None] * len(PERCENTILES)
    return _exec_snapshots(rows["time_s"].to_numpy(), rows["exec_bucket_counts"].to_numpy(dtype=object), rows["exec_bucket_bounds_us"].to_numpy(dtype=object))


def _exec_snapshots(times: np.ndarray, counts: np.ndarray, bounds: np.ndarray) -> tuple[int | None, list[float | None]]:
    """Executions and percentiles between the first and the last histogram snapshot in time."""
    order = np.argsort(times, kind="stable") if times.dtype.kind == "f" else pd.Series(times).sort_values(kind="stable").index.to_numpy()
    counts, bounds = counts[order], bounds[order]
    ends = _first_last(counts)
    if ends is None:
        return None, [None] * len(PERCENTILES)
    i_first, i_last = ends
    last = np.asarray(counts[i_last], dtype=float)
    first = np.asarray(counts[i_first], dtype=float)
    delta = last - first if i_first != i_last and first.shape == last.shape and (last >= first).all() else last
    return int(delta.sum()), [histogram_percentile(delta, bounds[i_last], q) for q in PERCENTILES]


def _device(device: str, rows: pd.DataFrame) -> DeviceRuntime:
    queue = rows["hlo_queue_size"].dropna() if "hlo_queue_size" in rows else pd.Series(dtype=float)
    count, (p50, p90, p99) = _exec_window(rows)
    return DeviceRuntime(
        device=device,
        source=str(rows["source"].iloc[0]),
        duty_cycle_pct=_mean(rows.get("duty_cycle_pct")),
        hlo_queue_mean=float(queue.mean()) if not queue.empty else None,
        hlo_queue_max=int(queue.max()) if not queue.empty else None,
        exec_count=count,
        exec_p50_us=p50,
        exec_p90_us=p90,
        exec_p99_us=p99,
    )


def _per_device(rows: pd.DataFrame) -> list[DeviceRuntime]:
    """`_device` of each device, in device order; on numpy arrays when the columns are numeric (a
    run holds a row per device and second: sub-frames per device cost more than the sums)."""
    numeric = {c: rows[c].to_numpy() for c in ("duty_cycle_pct", "hlo_queue_size") if c in rows}
    if any(v.dtype.kind not in "fiu" for v in numeric.values()):
        used = [c for c in ("source", "duty_cycle_pct", "hlo_queue_size", "time_s", "exec_bucket_counts", "exec_bucket_bounds_us") if c in rows]
        return [_device(str(d), g) for d, g in rows[used].groupby(rows["device"])]
    codes, names = pd.factorize(rows["device"], sort=True)
    times = rows["time_s"].to_numpy()
    hists = rows["exec_bucket_counts"].to_numpy(dtype=object) if "exec_bucket_counts" in rows else None
    bounds = rows["exec_bucket_bounds_us"].to_numpy(dtype=object) if hists is not None else None
    out = []
    for code, device in enumerate(names):
        where = np.flatnonzero(codes == code)
        duty = _present_values(numeric["duty_cycle_pct"][where].astype(float)) if "duty_cycle_pct" in numeric else None
        queue = _present_values(numeric["hlo_queue_size"][where]) if "hlo_queue_size" in numeric else np.empty(0)
        count, (p50, p90, p99) = _exec_snapshots(times[where], hists[where], bounds[where]) if hists is not None else (None, [None] * len(PERCENTILES))
        out.append(DeviceRuntime(
            device=str(device),
            source=str(rows["source"].iloc[where[0]]),
            duty_cycle_pct=float(np.mean(duty)) if duty is not None and duty.size else None,
            hlo_queue_mean=float(np.mean(queue)) if queue.size else None,
            hlo_queue_max=int(queue.max()) if queue.size else None,
            exec_count=count, exec_p50_us=p50, exec_p90_us=p90, exec_p99_us=p99,
        ))  # fmt: skip
    return out


def _present_values(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)] if values.dtype.kind == "f" else values


def _sampler_cpu_s(run: Run) -> float | None:
    events = run.table("sampler")
    if events.empty:
        return None
    stopped = events[events["event"] == "stopped"]
    for detail in stopped["detail"]:
        fields = dict(part.split("=", 1) for part in str(detail).split() if "=" in part)
        if "cpu_s" in fields:
            return float(fields["cpu_s"])
    return None


def analyze_runtime(run: Run) -> RuntimeStats:
    window = steady_window(run)
    table = run.table("runtime")
    device_rows, scope = rows_in(best_rows(run, "runtime"), window)
    host = rows_in(table[table["device"] == "host"], window)[0] if not table.empty else table
    per_device = _per_device(device_rows) if not device_rows.empty else []
    duty = device_rows.get("duty_cycle_pct") if not device_rows.empty else None
    return RuntimeStats(
        duty_cycle_pct=_mean(duty),
        sources=sorted({str(s) for s in device_rows["source"].unique()}) if not device_rows.empty else [],
        samples=int(device_rows["time_s"].nunique()) if not device_rows.empty else 0,
        per_device=per_device,
        host_cpu_pct=_mean(host.get("cpu_percent")) if not host.empty else None,
        process_cpu_pct=_mean(host.get("process_cpu_percent")) if not host.empty else None,
        gaps=gaps(run),
        sampler_cpu_s=_sampler_cpu_s(run),
        samples_span=scope if not device_rows.empty else None,
    )
