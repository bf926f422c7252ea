"""XSpace (`*.xplane.pb`) captures, one file per host, into the trace tables.

Each host's tables are built on their own (tpu_perf/traces/xspace_host.py), in parallel worker
processes when there are several hosts (tpu_perf/traces/xspace_pool.py), and stacked here. In a
multi-host capture devices and lanes are named `host<i>/<device>` (`host<i>/host` for the host's
own markers), `i` being the file's place in the capture (sorted paths); `hostnames` says which
machine each `i` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.traces.tables import (
    DEVICE_COLUMNS,
    OPS_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TraceTables,
    empty,
)
from tpu_perf.traces.xspace_pool import read_hosts


def _clean(df: pd.DataFrame) -> bool:
    """Whether every column is already numeric, or objects with unknown as None (a host read in
    this process): then the frame is the answer as it is."""
    for c, dtype in df.dtypes.items():
        if isinstance(dtype, np.dtype) and dtype.kind == "O":
            values = df[c].to_numpy()
            missing = pd.isna(values)
            if missing.any() and any(v is not None for v in values[missing]):
                return False
        elif isinstance(dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(dtype):
            return False
    return True


def _stack(parts: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows of every host, text columns as plain objects with unknown as None (never NaN), whichever
    way a host was read (in process: objects already; from a worker: categoricals or Arrow strings).

    Each column is joined as one numpy array and the frame is built once: pandas' own concat and
    per-column Series work cost ms per table, most of a small capture's read."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return empty(columns)
    if len(parts) == 1 and _clean(parts[0]):
        out = parts[0] if parts[0].index.equals(pd.RangeIndex(len(parts[0]))) else parts[0].reset_index(drop=True)
        return out if tuple(out.columns) == tuple(columns) else out.reindex(columns=list(columns))
    cols: dict[str, Any] = {}
    for c in parts[0].columns:
        series = [p[c] for p in parts]
        if all(pd.api.types.is_numeric_dtype(s.dtype) and not isinstance(s.dtype, pd.CategoricalDtype) for s in series):
            cols[c] = np.concatenate([s.to_numpy() for s in series]) if len(series) > 1 else series[0].to_numpy()
            continue
        values = np.concatenate([s.to_numpy(dtype=object) for s in series])
        missing = pd.isna(values)
        if missing.any():
            values[missing] = None
        cols[c] = pd.Series(values, dtype=object)
    out = pd.DataFrame(cols)
    return out if tuple(out.columns) == tuple(columns) else out.reindex(columns=list(columns))


def read_xspace(paths: Sequence[Path], *, workers: int | None = None) -> TraceTables:
    """Tables from one XSpace per host (a multi-host capture is one file per host).

    `workers`: processes reading hosts at once (default: one per core, within the memory budget
    of tpu_perf/traces/xspace_pool.py)."""
    ops, timeline, steps, devices, hostnames, zeros = [], [], [], [], [], []
    for host in read_hosts(list(paths), workers=workers):
        zeros.append(host.clock_zero_s)
        ops.append(host.ops)
        timeline.append(host.timeline)
        steps.append(host.device_steps)
        devices.append(host.devices)
        hostnames.append(host.hostname)
    steps_df = _stack(steps, STEP_COLUMNS)
    if (steps_df["source"] == "device").any():
        steps_df = steps_df[steps_df["source"] == "device"].reset_index(drop=True)
    devices_df = _stack(devices, DEVICE_COLUMNS)
    names = [str(n) for n in devices_df["name"].tolist()]
    platform = "tpu" if any(n.startswith("/device:TPU") for n in names) else ("gpu" if any(n.startswith("/device:GPU") for n in names) else "cpu")
    return TraceTables(
        ops=_stack(ops, OPS_COLUMNS), timeline=_stack(timeline, TIMELINE_COLUMNS), device_steps=steps_df, devices=devices_df,
        format="xspace", platform=platform, files=tuple(str(p) for p in paths), hostnames=tuple(hostnames),
        clock_zero_s=zeros[0] if zeros else None,
    )
