"""Formatting of the comparison (`tpu_perf.analyzers.compare`) for the dashboard's screens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from tpu_perf.analyzers import compare
from tpu_perf.views import format as fmt


def rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} tokens/s"


def money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.4g}"


def tflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g} TFLOP/s"


FORMATS = {"seconds": fmt.seconds, "fraction": fmt.percent, "rate": rate, "bytes": fmt.bytes_, "money": money, "flops": fmt.flops, "tflops": tflops}
"""One formatter per `compare.UNITS` entry."""


def kpi_rows(docs: Mapping[str, Mapping[str, Any]], baseline: str, price_per_chip_hour: float | None = None) -> pd.DataFrame:
    """`compare.kpi_rows` with each value's text as shown (`shown`)."""
    rows = compare.kpi_rows(docs, baseline, price_per_chip_hour)
    if not rows.empty:
        rows["shown"] = [FORMATS[u](None if pd.isna(v) else v) for u, v in zip(rows["unit"], rows["value"], strict=True)]
        all_in = (rows["kpi"] == "Step time") & rows["run"].map(lambda label: compare.dig(docs[label], "steps.step_basis") == "all-in") & rows["value"].notna()
        rows.loc[all_in, "shown"] += " all-in"  # the headline's basis, as `ls` and the runs table mark it
    return rows
