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

import pandas as pd
from pandas.api.types import union_categoricals

from tpu_perf.traces.tables import (
    DEVICE_COLUMNS,
    OPS_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TraceTables,
    empty,
)
from tpu_perf.traces.xspace_pool import read_hosts


def _stack(parts: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows of every host; categorical columns are joined as categoricals, then given back as plain
    objects that share one string per distinct value (a few bytes per row, not one string each).
    Unknown text is None, never NaN."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return empty(columns)
    if len(parts) == 1:
        out = parts[0].reset_index(drop=True)
    else:
        cols = {}
        for c in parts[0].columns:
            series = [p[c] for p in parts]
            if all(isinstance(s.dtype, pd.CategoricalDtype) for s in series):
                cols[c] = pd.Series(union_categoricals(series, ignore_order=True))
            else:
                cols[c] = pd.concat(series, ignore_index=True)
        out = pd.DataFrame(cols)
    cols = {}
    for c in out.columns:  # text columns as objects, unknown as None (whichever way the host was read)
        col = out[c]
        if isinstance(col.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(col.dtype):
            values = col.to_numpy(dtype=object)
            missing = pd.isna(values)
            if missing.any():
                values = values.copy()
                values[missing] = None
            col = pd.Series(values, index=out.index, dtype=object)
        cols[c] = col
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
    names = devices_df["name"].astype(str)
    platform = "tpu" if names.str.startswith("/device:TPU").any() else ("gpu" if names.str.startswith("/device:GPU").any() else "cpu")
    return TraceTables(
        ops=_stack(ops, OPS_COLUMNS), timeline=_stack(timeline, TIMELINE_COLUMNS), device_steps=steps_df, devices=devices_df,
        format="xspace", platform=platform, files=tuple(str(p) for p in paths), hostnames=tuple(hostnames),
        clock_zero_s=zeros[0] if zeros else None,
    )
