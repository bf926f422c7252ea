"""The run page's tables as people read them: column names in words with their units, values in
those units (MiB, ms, %), and the advisor's evidence with each number formatted by its unit.

The keys stay the report's (`memory.per_device[].peak_bytes`...); only their display changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from tpu_perf.units import seconds
from tpu_perf.views import format as fmt

DEVICE_MEMORY_COLUMNS = {"device": "device", "peak_bytes": "peak", "capacity_bytes": "capacity", "peak_of_capacity": "peak of capacity", "source": "measured by", "peak_time_s": "peak at (since start)"}
DEVICE_MEMORY_NUMERIC = ("peak", "capacity", "peak of capacity", "peak at (since start)")
SLOWEST_COMPILE_COLUMNS = {"function": "function", "duration_s": "compile time (s)"}
DEVICE_COLUMNS = {"id": "device", "kind": "kind", "chip": "chip", "peak_tflops": "peak FLOP/s", "peak_hbm_gbps": "peak HBM bandwidth", "source": "seen in"}


def _known(value: float) -> float | None:
    return None if pd.isna(value) else float(value)


def device_memory(rows: Sequence[Mapping[str, Any]], started_at: float | None) -> pd.DataFrame:
    """`memory.per_device` as text: bytes in their unit, the peak as a share of the capacity, its
    time since the run started ("n/a" where unknown)."""
    frame = pd.DataFrame(list(rows))
    number = {c: pd.to_numeric(frame[c], errors="coerce") for c in ("peak_bytes", "capacity_bytes", "peak_time_s") if c in frame}
    if {"peak_bytes", "capacity_bytes"} <= set(number):
        frame["peak_of_capacity"] = [fmt.percent(_known(p / c) if c else None) for p, c in zip(number["peak_bytes"], number["capacity_bytes"], strict=True)]
    for column in ("peak_bytes", "capacity_bytes"):
        if column in number:
            frame[column] = [fmt.bytes_(_known(v)) for v in number[column]]
    if "peak_time_s" in number and started_at is not None:
        frame["peak_time_s"] = [seconds(_known(v - float(started_at))) for v in number["peak_time_s"]]
    elif "peak_time_s" in frame:
        frame = frame.drop(columns=["peak_time_s"])
    order = [c for c in DEVICE_MEMORY_COLUMNS if c in frame]
    return frame[order].rename(columns=DEVICE_MEMORY_COLUMNS)


def devices(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The report's `devices`: peak FLOP/s and HBM bandwidth in their units, n/a where unknown."""
    return as_text(renamed(rows, DEVICE_COLUMNS), {"peak FLOP/s": tflops, "peak HBM bandwidth": gbps})


def renamed(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """Rows of a report list with the known columns in words, in that order (others kept after)."""
    frame = pd.DataFrame(list(rows))
    order = [c for c in columns if c in frame] + [c for c in frame if c not in columns]
    return frame[order].rename(columns=dict(columns))


UNIT_SUFFIXES = (("_fraction", "fraction"), ("_bytes", "bytes"), ("_s", "seconds"), ("_count", "count"), ("_pct", "percent"))


def evidence_value(name: str, value: Any) -> str:
    """One advisor evidence number in its unit (the unit is in the name: `_s`, `_bytes`, `_fraction`, `_count`)."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    unit = next((u for suffix, u in UNIT_SUFFIXES if name.endswith(suffix)), None)
    if unit == "fraction":
        return fmt.percent(float(value))
    if unit == "bytes":
        return fmt.bytes_(float(value))
    if unit == "seconds":
        return fmt.seconds(float(value))
    if unit == "percent":
        return f"{float(value):.1f} %"
    if unit == "count" or isinstance(value, int):
        return f"{int(value):,}"
    return f"{value:.4g}"


def evidence_label(name: str) -> str:
    """`host_wait_fraction` → "host wait": the unit is said by the value."""
    for suffix, _ in UNIT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.replace("_", " ")


def evidence_table(evidence: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """A finding's evidence: what, the value in its unit, where it came from (the report key)."""
    return pd.DataFrame(
        [{"evidence": evidence_label(str(e["name"])), "value": evidence_value(str(e["name"]), e.get("value")), "from": f"{e.get('source')}: {e.get('path')}"} for e in evidence],
        columns=["evidence", "value", "from"],
    )


def ms(value: float | None) -> str:
    """Seconds shown in ms (the ops and breakdown tables' unit), n/a where unknown."""
    return "n/a" if value is None or value != value else f"{value * 1e3:.3f} ms"  # NaN: unknown too


def share(value: float | None) -> str:
    """A share of the step; past 100 % it is no share (ops nested in each other, counted twice): n/a."""
    return "n/a" if value is None or value > 1.0005 else fmt.percent(value)


def change(value: float | None) -> str:
    """A change against the baseline, signed: +12 %, −61 %."""
    return "n/a" if value is None else f"{value * 100:+.0f} %".replace("-", "−")


def gbps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} GB/s"


def tflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} TFLOP/s"


def as_text(frame: pd.DataFrame, formats: Mapping[str, Callable[[float | None], str]]) -> pd.DataFrame:
    """The frame with each named column in its unit as text, "n/a" where unknown: a number column
    of `st.dataframe` shows "None" for a missing value; every other column's missing value is n/a."""
    shown = frame.copy()
    for column in shown.columns:
        if column in formats:
            shown[column] = [formats[column](None if v is None or pd.isna(v) else float(v)) for v in shown[column]]
        elif shown[column].dtype == object or str(shown[column].dtype) in ("str", "string"):
            shown[column] = [("n/a" if v is None or (isinstance(v, float) and pd.isna(v)) else v) for v in shown[column]]
    return shown
