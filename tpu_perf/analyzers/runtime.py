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
import pyarrow as pa

from tpu_perf.analyzers.timeline import Gap, best_positions, best_rows, gaps, rows_in, steady_window
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


@dataclass(frozen=True)
class _Histograms:
    """The runtime table's execution-time histograms as Arrow (`Run.arrow_column`): which rows hold
    one, by position in the table, and the few rows an analysis reads (a run holds a row per device
    and second; turning every one into an array is most of reading the table)."""

    counts: pa.ChunkedArray
    bounds: pa.ChunkedArray | None
    present: np.ndarray

    def at(self, position: int) -> tuple[Any, Any]:
        return self.counts[position].as_py(), self.bounds[position].as_py() if self.bounds is not None else None


def _histograms(run: Run) -> _Histograms | None:
    counts = run.arrow_column("runtime", "exec_bucket_counts")
    if counts is None:
        return None
    present = counts.is_valid().to_numpy(zero_copy_only=False)
    return _Histograms(counts=counts, bounds=run.arrow_column("runtime", "exec_bucket_bounds_us"), present=present)


def _exec_snapshots(times: np.ndarray, positions: np.ndarray, hist: _Histograms | None) -> tuple[int | None, list[float | None]]:
    """Executions and percentiles between the first and the last histogram snapshot in time."""
    if hist is None:
        return None, [None] * len(PERCENTILES)
    order = np.argsort(times, kind="stable") if times.dtype.kind == "f" else pd.Series(times).sort_values(kind="stable").index.to_numpy()
    held = positions[order][hist.present[positions[order]]]
    if not held.size:
        return None, [None] * len(PERCENTILES)
    (first, _), (last, bounds) = hist.at(int(held[0])), hist.at(int(held[-1]))
    last, first = np.asarray(last, dtype=float), np.asarray(first, dtype=float)
    delta = last - first if held.size > 1 and first.shape == last.shape and (last >= first).all() else last
    return int(delta.sum()), [histogram_percentile(delta, bounds, q) for q in PERCENTILES]


def _device(device: str, rows: pd.DataFrame, positions: np.ndarray, hist: _Histograms | None) -> DeviceRuntime:
    queue = rows["hlo_queue_size"].dropna() if "hlo_queue_size" in rows else pd.Series(dtype=float)
    count, (p50, p90, p99) = _exec_snapshots(rows["time_s"].to_numpy(), positions, hist)
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


def _per_device(rows: pd.DataFrame, positions: np.ndarray, hist: _Histograms | None) -> list[DeviceRuntime]:
    """`_device` of each device, in device order; on numpy arrays when the columns are numeric (a
    run holds a row per device and second: sub-frames per device cost more than the sums).
    `positions`: each row's position in the table, where `hist` finds its histogram."""
    numeric = {c: rows[c].to_numpy() for c in ("duty_cycle_pct", "hlo_queue_size") if c in rows}
    if any(v.dtype.kind not in "fiu" for v in numeric.values()):
        return [_device(str(d), rows.iloc[where], positions[where], hist) for d, where in sorted(rows.groupby("device").indices.items())]
    codes, names = pd.factorize(rows["device"], sort=True)
    times = rows["time_s"].to_numpy()
    out = []
    for code, device in enumerate(names):
        where = np.flatnonzero(codes == code)
        duty = _present_values(numeric["duty_cycle_pct"][where].astype(float)) if "duty_cycle_pct" in numeric else None
        queue = _present_values(numeric["hlo_queue_size"][where]) if "hlo_queue_size" in numeric else np.empty(0)
        count, (p50, p90, p99) = _exec_snapshots(times[where], positions[where], hist)
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


def _table_positions(run: Run, rows: pd.DataFrame) -> np.ndarray:
    """Rows of `best_rows(run, "runtime")` (its index: their place among the best rows) as
    positions in the table, which `Run.arrow_column` is indexed by."""
    best, index = best_positions(run, "runtime"), rows.index.to_numpy()
    return best.positions[index] if best is not None else index


def analyze_runtime(run: Run) -> RuntimeStats:
    window = steady_window(run)
    table = run.scalar_table("runtime")
    device_rows, scope = rows_in(best_rows(run, "runtime"), window)
    host = rows_in(table[table["device"] == "host"], window)[0] if not table.empty else table
    per_device = _per_device(device_rows, _table_positions(run, device_rows), _histograms(run)) if not device_rows.empty else []
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
