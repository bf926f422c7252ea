"""Find the trace files under a path and turn them into tables written into a run folder."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pandas as pd

from tpu_perf.errors import DataError, UsageError
from tpu_perf.store import RunWriter
from tpu_perf.traces.tables import (
    DEVICE_COLUMNS,
    OPS_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TraceTables,
    empty,
)

TABLES = ("ops", "timeline", "device_steps", "devices")
_KINETO = re.compile(r"\.json(\.gz)?$")
_RANK = re.compile(r"rank[-_]?(\d+)", re.I)


def find_traces(path: Path) -> tuple[list[Path], list[Path]]:
    """(xplane files, Kineto files) under `path`: a file, a log dir, or a folder of per-host/rank files.

    In an XProf log dir only the newest `plugins/profile/<run>/` session is taken; its
    `*.trace.json.gz` twins (written by jax next to each xplane) are not Kineto traces.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder; give an .xplane.pb, a Kineto .json(.gz) or a log dir")
    if not path.is_dir() and not _regular(path):
        raise UsageError(f"{path}: not a regular file (a pipe, device or socket); give an .xplane.pb, a Kineto .json(.gz) or a log dir")
    if path.is_file():
        if path.name.endswith(".xplane.pb"):
            return [path], []
        if _KINETO.search(path.name):
            return [], [path]
        raise UsageError(f"{path}: not a trace file (expected *.xplane.pb, *.json or *.json.gz)")
    xplanes = sorted(p for p in path.rglob("*.xplane.pb") if _regular(p))
    if xplanes:
        sessions = sorted({p.parent for p in xplanes})
        newest = sessions[-1]
        return [p for p in xplanes if p.parent == newest], []
    kineto = sorted(p for p in path.rglob("*") if _regular(p) and _KINETO.search(p.name) and not p.name.endswith(".trace.json.gz"))
    kineto = kineto or sorted(p for p in path.rglob("*.json*") if _regular(p) and _KINETO.search(p.name))
    if not kineto:
        raise UsageError(f"{path}: no *.xplane.pb or Kineto *.json(.gz) traces found under it")
    return [], kineto


def _regular(path: Path) -> bool:
    """A regular file (symlinks followed): never a FIFO, device or socket, whose reads never end."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def default_max_bytes() -> int:
    """Half the memory available now: what `import --max-bytes` allows when not given. Trace
    readers hold a bounded window of a file, but the tables they build grow with its events."""
    import psutil

    return int(psutil.virtual_memory().available // 2)


def check_size(files: list[Path], max_bytes: int) -> None:
    """UsageError when the traces together are larger than `max_bytes` (one line, naming the flag)."""
    total = sum(os.stat(f).st_size for f in files)
    if total > max_bytes:
        where = files[0] if len(files) == 1 else f"{files[0].parent} ({len(files)} files)"
        raise UsageError(f"{where}: {total / 1e9:.2f} GB of traces is over --max-bytes {max_bytes / 1e9:.2f} GB; give a larger --max-bytes if this machine has the memory")


def _concat(parts: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True).reindex(columns=list(columns)) if parts else empty(columns)


def read_traces(path: Path, *, max_bytes: int | None = None) -> TraceTables:
    """All traces under `path` as one set of tables (Kineto ranks side by side). Files together
    larger than `max_bytes` (default: half the available memory) are refused before any is read,
    and so is a compressed trace whose contents pass it."""
    from tpu_perf.traces.kineto import read_kineto
    from tpu_perf.traces.xspace import read_xspace

    xplanes, kineto = find_traces(path)
    max_bytes = default_max_bytes() if max_bytes is None else max_bytes
    check_size(xplanes or kineto, max_bytes)
    if xplanes:
        return read_xspace(xplanes)
    parts = []
    for i, f in enumerate(kineto):
        m = _RANK.search(f.name)
        parts.append(read_kineto(f, rank=int(m.group(1)) if m else (i if len(kineto) > 1 else None), max_bytes=max_bytes))
    return TraceTables(
        ops=_concat([p.ops for p in parts], OPS_COLUMNS), timeline=_concat([p.timeline for p in parts], TIMELINE_COLUMNS),
        device_steps=_concat([p.device_steps for p in parts], STEP_COLUMNS), devices=_concat([p.devices for p in parts], DEVICE_COLUMNS),
        format="kineto", platform="gpu" if any(p.platform == "gpu" for p in parts) else "cpu", files=tuple(str(f) for f in kineto),
        clock_zero_s=parts[0].clock_zero_s if len({p.clock_zero_s for p in parts}) == 1 else None,  # ranks on one time zero only
    )


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding mixed None/str/num become strings or floats so Parquet accepts them."""
    from pandas.api.types import infer_dtype

    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object and infer_dtype(out[col], skipna=True) not in ("string", "empty"):  # all str/None: as is
            num = pd.to_numeric(out[col], errors="coerce")
            if num.notna().sum() == out[col].notna().sum() and out[col].notna().any() and not out[col].map(lambda v: isinstance(v, str)).any():
                out[col] = num.astype(float)
            else:
                out[col] = out[col].map(lambda v: None if v is None or (isinstance(v, float) and v != v) else str(v))
    return out


def write_tables(writer: RunWriter, tables: TraceTables) -> None:
    """Write the trace tables into the run folder (each atomically)."""
    for name in TABLES:
        writer.write_table(name, _clean(getattr(tables, name)))


def hardware(tables: TraceTables) -> dict[str, object]:
    """The manifest's `hardware` block, from the trace's own device planes/properties."""
    devs = tables.devices
    accel = devs[~devs["kind"].astype(str).str.lower().eq("cpu")] if not devs.empty else devs
    if accel.empty:
        return {"platform": "cpu", "device_count": max(1, int(len(devs))), "device_kind": "cpu", "source": "trace"}  # the host: as many as the trace names
    first = accel.iloc[0]
    return {
        "platform": tables.platform, "device_count": int(len(accel)), "device_kind": str(first["kind"]), "chip": first["chip"],
        "peak_tflops_per_device": None if pd.isna(first["peak_tflops"]) else float(first["peak_tflops"]),
        "peak_hbm_gbps": None if pd.isna(first["peak_hbm_gbps"]) else float(first["peak_hbm_gbps"]), "source": "trace",
    }


def check_readable(tables: TraceTables) -> None:
    if tables.ops.empty and tables.device_steps.empty and tables.timeline.empty:
        raise DataError(f"{', '.join(tables.files)}: the trace holds no ops, steps or device activity to import")
