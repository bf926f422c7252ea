"""The typed schema of a run folder, checked once when a run is read.

`run.json` is checked with msgspec against `RunManifest` (types of the fields readers use, then their
domains: finite times in a plausible range, a known status). Tables are checked against Arrow schemas
(`TABLE_COLUMNS`: the columns readers use, with their kinds) and their durations against their domain.
A check that fails gives one reason naming the file and the field; the reader turns it into a
*damaged* run (`Damage`), which is listed as damaged and never stops other runs from loading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.types as pat

from tpu_perf.store import layout

EARLIEST_TIME = 946_684_800.0
"""2000-01-01: no run was recorded before it; a smaller start time is damage, not history."""
LATEST_TIME = 4_102_444_800.0
"""2100-01-01: a time past it cannot be a clock's reading."""
MAX_DURATION_S = 7 * 24 * 3600.0
"""A step, compile or event longer than a week is not a measurement."""


@dataclass(frozen=True)
class Damage:
    """Why a run folder cannot be read: the file (URL) and one reason naming the field."""

    url: str
    reason: str
    run_id: str = ""
    """The id (folder name) of the run that is damaged; set by `scan_runs` and `check_run`."""

    def __str__(self) -> str:
        return f"{self.url}: {self.reason}"


class ErrorInfo(msgspec.Struct):
    message: str | None = None
    traceback_file: str | None = None


class RunManifest(msgspec.Struct):
    """The run.json fields readers rely on, with their types; other fields are kept as they are."""

    id: str
    schema_version: int = 0
    name: str | None = None
    status: str = "crashed"
    tags: dict[str, str] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    heartbeat_at: float | None = None
    exit_code: int | None = None
    pid: int | None = None
    host: str | None = None
    job: bool | None = None
    process_index: int | None = None
    process_count: int | None = None
    error: ErrorInfo | None = None
    warnings: list[str] | None = None
    command: list[str] | None = None
    argv: list[str] | None = None
    script: str | None = None
    module: str | None = None
    config: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    tables: list[str] | None = None


TIME_FIELDS = ("started_at", "ended_at", "heartbeat_at")


def manifest_problem(manifest: Any) -> str | None:
    """None when `manifest` (run.json decoded) fits the schema, else one reason naming the field."""
    if not isinstance(manifest, dict):
        return f"not a JSON object (a {type(manifest).__name__})"
    if "id" not in manifest:
        return "not a tpu-perf manifest (no 'id')"
    version = manifest.get("schema_version", 0)
    if isinstance(version, str) or isinstance(version, bool) or not isinstance(version, int):
        return f"field schema_version: expected an integer, got {type(version).__name__} {version!r}"
    if version > layout.SCHEMA_VERSION:
        return f"schema_version {version} is newer than this tpu-perf reads ({layout.SCHEMA_VERSION}); upgrade tpu-perf"
    try:
        msgspec.convert(manifest, RunManifest, strict=True)
    except msgspec.ValidationError as exc:
        return _field_message(str(exc))
    if manifest.get("status", "crashed") not in layout.STATUSES:
        return f"field status: {manifest['status']!r} is not one of {', '.join(layout.STATUSES)}"
    for key in TIME_FIELDS:
        value = manifest.get(key)
        if value is not None and not (math.isfinite(value) and EARLIEST_TIME <= value <= LATEST_TIME):
            return f"field {key}: {value!r} is not a time (seconds since 1970 between 2000 and 2100)"
    if not manifest["id"] or "/" in manifest["id"]:
        return f"field id: {manifest['id']!r} is not a run id"
    return None


def _field_message(text: str) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.name`" as "field name: expected str, got int"."""
    message, _, where = text.partition(" - at ")
    field = where.strip("`").removeprefix("$").lstrip(".") or "(top level)"
    return f"field {field}: {message.replace('`', '')[:1].lower()}{message.replace('`', '')[1:]}"


# -- tables -----------------------------------------------------------------------------------

NUMBER, TEXT, FLAG = "number", "text", "flag"

TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "steps": {"step": NUMBER, "start_time_s": NUMBER, "end_time_s": NUMBER, "duration_s": NUMBER, "device_s": NUMBER, "source": TEXT},
    "compiles": {"time_s": NUMBER, "duration_s": NUMBER},
    "memory": {"time_s": NUMBER, "bytes_in_use": NUMBER},
}
"""The columns readers use in each checked table, and their kinds (checked where present). Other
tables and columns are free."""

REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {"steps": ("duration_s",), "compiles": ("duration_s",)}
"""Columns a non-empty table must have: without them it is some other table."""

DURATION_COLUMNS: dict[str, tuple[str, ...]] = {"steps": ("duration_s",), "compiles": ("duration_s",)}
"""Columns that hold durations: non-negative, finite, under `MAX_DURATION_S`."""

TIME_COLUMNS: dict[str, tuple[str, ...]] = {"steps": ("start_time_s", "end_time_s"), "compiles": ("time_s",), "memory": ("time_s",)}
"""Columns that hold times: finite (they are seconds on the run's clock, so any finite value)."""


def _kind_ok(kind: str, arrow_type: pa.DataType) -> bool:
    if pat.is_null(arrow_type):
        return True  # a column of nothing but nulls (an empty or all-unknown table)
    if kind == NUMBER:
        return pat.is_integer(arrow_type) or pat.is_floating(arrow_type)
    if kind == TEXT:
        return pat.is_string(arrow_type) or pat.is_large_string(arrow_type)
    return pat.is_boolean(arrow_type)


def schema_problem(table: str, schema: pa.Schema) -> str | None:
    """None when a Parquet table's schema has the columns readers use, with the right kinds."""
    wanted = TABLE_COLUMNS.get(table)
    if not wanted or len(schema.names) == 0:
        return None
    for column in REQUIRED_COLUMNS.get(table, ()):
        if column not in schema.names:
            return f"column {column} is missing (the table has {', '.join(schema.names[:8])})"
    for column, kind in wanted.items():
        if column not in schema.names:
            continue
        arrow_type = schema.field(column).type
        if not _kind_ok(kind, arrow_type):
            return f"column {column} is {arrow_type}, expected a {kind}"
    return None


def frame_problem(table: str, frame: pd.DataFrame) -> str | None:
    """The `schema_problem` of a table read from JSON lines, checked on its pandas dtypes."""
    wanted = TABLE_COLUMNS.get(table)
    if not wanted or frame.empty:
        return None
    for column in REQUIRED_COLUMNS.get(table, ()):
        if column not in frame.columns:
            return f"column {column} is missing (the table has {', '.join(map(str, frame.columns[:8]))})"
    for column, kind in wanted.items():
        if column not in frame.columns:
            continue
        values = frame[column].dropna()
        if kind == NUMBER and len(values) and not pd.api.types.is_numeric_dtype(values.infer_objects()):
            return f"column {column} holds {values.infer_objects().dtype} values, expected numbers"
    return None


def values_problem(table: str, frame: pd.DataFrame) -> str | None:
    """None when every duration and time in the table is in its domain, else one reason."""
    for column in DURATION_COLUMNS.get(table, ()):
        if column in frame.columns:
            values = pd.to_numeric(frame[column], errors="coerce")
            bad = values[values.notna() & ~((values >= 0) & (values <= MAX_DURATION_S))]
            bad = pd.concat([bad, values[values.isna() & frame[column].notna()]])
            if len(bad):
                return f"column {column}: {len(bad)} value(s) outside 0 s to {MAX_DURATION_S:.0f} s or not numbers (first {bad.iloc[0]!r})"
    for column in TIME_COLUMNS.get(table, ()):
        if column in frame.columns:
            values = pd.to_numeric(frame[column], errors="coerce")
            bad = values[values.notna().to_numpy() & ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))]
            if len(bad):
                return f"column {column}: {len(bad)} value(s) are not finite (first {bad.iloc[0]!r})"
    return None
