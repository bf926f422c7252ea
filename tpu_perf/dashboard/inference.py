"""The run page's inference table: the report's `inference` section (generation requests), one row
per figure, with the same words and units as `tpu-perf report` (views/inference.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.views import format as fmt
from tpu_perf.views.inference import latency


def inference_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """Figure / value rows of the run's generation requests; empty for a run that served none."""
    i = doc.get("inference")
    if not i:
        return pd.DataFrame(columns=["figure", "value"])
    rows = [
        ("requests", f"{i['requests']} ({i['calls']} calls, {i['source']})"),
        ("prompt / generated tokens", f"{'n/a' if i['prompt_tokens'] is None else i['prompt_tokens']} / {i['generated_tokens']}"),
        ("time to first token", latency(i["ttft_s"])),
        ("time per output token", latency(i["tpot_s"])),
        ("inter-token latency", latency(i["itl_s"])),
        ("end to end", latency(i["e2e_s"])),
        ("generated tokens/s", f"{fmt.number(i['tokens_per_s'], 4)} (prefill included)"),
        ("prefill / decode", "n/a" if i["prefill_share"] is None else f"{fmt.percent(i['prefill_share'])} / {fmt.percent(i['decode_share'])}"),
        ("decode step reads", fmt.bytes_(i["decode_bytes_per_step"]) + (f" ({i['decode_bytes_source']})" if i["decode_bytes_source"] else "")),
        ("achieved bandwidth", "n/a" if i["achieved_bytes_per_s"] is None else f"{fmt.bytes_(i['achieved_bytes_per_s'])}/s"),
        ("MBU", fmt.percent(i["mbu"]) if i["mbu"] is not None else f"n/a ({i['mbu_reason']})"),
    ]
    return pd.DataFrame(rows, columns=["figure", "value"])


def render(doc: dict[str, Any]) -> None:
    frame = inference_frame(doc)
    if frame.empty:
        return
    st.markdown("**Inference**: generation requests (docs/inference.md defines each figure)")
    st.dataframe(frame, hide_index=True, width="stretch", key="run_inference")
