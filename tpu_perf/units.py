"""Durations in words, one way everywhere: `1.200 s`, `43.00 ms`, `12.3 µs`.

A base module (it imports nothing of tpu_perf), so the analyzers' own sentences (the verdict's
"leaves out 3 inside the trace window (43.00 ms)") say a time as the views (`report`, the run page)
say it: the same steps read the same on every page."""

from __future__ import annotations


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"
