"""The run page's Hosts tab for a multi-process job: one row per process (the report's `hosts`),
the stragglers it names, and a hosts x steps heatmap of each process's step times."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.dashboard import data, figures

HOST_COLUMNS = {
    "process_index": "process", "hostname": "host", "status": "status", "steps": "steps",
    "median_s": "median step (ms)", "own_median_s": "own work (ms)", "wait_median_s": "waiting (ms)",
    "device_median_s": "device (ms)", "devices": "devices", "peak_hbm_bytes": "peak HBM (MiB)",
}  # fmt: skip


def hosts_table(hosts: list[dict[str, Any]]) -> pd.DataFrame:
    """The report's `hosts` with words and units: times in ms, memory in MiB; unknown stays empty."""
    frame = pd.DataFrame(hosts).reindex(columns=list(HOST_COLUMNS))
    for column in ("median_s", "own_median_s", "wait_median_s", "device_median_s"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") * 1e3
    frame["peak_hbm_bytes"] = pd.to_numeric(frame["peak_hbm_bytes"], errors="coerce") / 2**20
    frame["top_op"] = [(h.get("top_ops") or [{}])[0].get("name") for h in hosts]
    return frame.rename(columns={**HOST_COLUMNS, "top_op": "top op (trace)"})


SPREAD_COLUMNS = {"op": "op", "hosts": "hosts", "min_s": "min (ms)", "median_s": "median (ms)", "max_s": "max (ms)", "slowest_host": "slowest host"}


def spread_table(spread: list[dict[str, Any]]) -> pd.DataFrame:
    """The report's `ops_spread`: each op's time over the hosts' trace windows, in ms."""
    frame = pd.DataFrame(spread).reindex(columns=list(SPREAD_COLUMNS))
    for column in ("min_s", "median_s", "max_s"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") * 1e3
    return frame.rename(columns=SPREAD_COLUMNS)


def render(doc: dict[str, Any], ref: data.RunRef) -> None:
    job = doc.get("job") or {}
    hosts = doc.get("hosts") or []
    st.markdown(f"**{job.get('processes', len(hosts))} processes**" + (f": {job['note']}." if job.get("note") else "."))
    for s in doc.get("stragglers") or []:
        st.warning(f"Straggler: {s['text']}.", icon=":material/slow_motion_video:")
    st.dataframe(hosts_table(hosts), hide_index=True, width="stretch", key="run_hosts")
    if doc.get("ops_spread"):
        st.markdown("**Ops over hosts** (each host's own trace window; the slowest host per op)")
        st.dataframe(spread_table(doc["ops_spread"]), hide_index=True, width="stretch", key="run_ops_spread")
    frame = data.hosts_frame(ref.url, ref.stamp)
    if frame.empty:
        st.info("No process of this job recorded a step: no heatmap.", icon=":material/info:")
        return
    has_own = frame["own_s"].notna().any()
    choice = st.radio("Colour", ["iteration", "own work (iteration − waits)"] if has_own else ["iteration"], horizontal=True, key="hosts_value", help="own work: the iteration minus the time the loop was blocked in syncs and collectives; the process whose own work is longest is the one the others wait for")
    st.plotly_chart(figures.hosts_heatmap(frame, "own_s" if choice and choice.startswith("own") else "duration_s"), width="stretch", key="run_hosts_heatmap")
