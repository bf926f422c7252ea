"""The run page's TPU-compile table: the report's `aot` section (`record --topology`), one row per slice."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.views import format as fmt
from tpu_perf.views.aot import aot_entries


def aot_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """One row per compiled slice, numbers formatted with their units ("n/a" where unknown)."""
    rows = []
    for a in aot_entries(doc):
        rows.append({
            "slice": a["topology"],
            "chips": f"{a['chips']} x {a['chip']}",
            "FLOPs / step": fmt.flops(a["flops_per_step"]),
            "roofline step": fmt.seconds(a["optimal_step_s"]),
            "roofline MFU": fmt.percent(a["roofline_mfu"]),
            "peak HBM / device": fmt.bytes_(a["peak_hbm_bytes"]),
            "HBM / device": fmt.bytes_(a["hbm_capacity_bytes"]),
            "fits": {True: "yes", False: "NO", None: "n/a"}[a["fits"]],
            "collectives": ", ".join(f"{k} x{v['count']} {fmt.bytes_(v['bytes'])}" for k, v in a["collectives"].items()) or "none",
        })
    return pd.DataFrame(rows)


def render(doc: dict[str, Any]) -> None:
    frame = aot_frame(doc)
    if frame.empty:
        return
    st.markdown("**TPU compile** (`record --topology`): the TPU compiler's estimates for these slices, not measurements")
    st.dataframe(frame, hide_index=True, width="stretch", key="run_aot")
