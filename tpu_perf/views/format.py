"""Number formatting for people: units always shown, "n/a" only here, never in data."""

from __future__ import annotations

import datetime as dt


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"


def bytes_(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value} B"


def flops(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} FLOP"


def percent(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f} %"


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def timestamp(epoch: float | None) -> str:
    if epoch is None:
        return "n/a"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")
