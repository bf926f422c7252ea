"""Step-time breakdown from the trace timeline: where each step's wall time went.

Per step window and device lane, every instant gets exactly one label by a sweep line over the
timeline's intervals (+1 at starts, -1 at ends), in priority order: collectives, matmul/convolution,
data movement, other compute; else, with no device op running, device idle inside a program,
compile, input pipeline, or host time between device programs. So the parts sum to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.store import Run
from tpu_perf.traces.intervals import coverage
from tpu_perf.traces.tables import OP_CLASSES

PARTS = (*OP_CLASSES, "device_idle", "compile", "input", "host")
"""Breakdown parts; `host` is time between device programs not explained by compile or input."""


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    per_step: pd.DataFrame
    """One row per (lane, step): `step_s` and seconds per part."""
    fractions: dict[str, float]
    """Share of all step time per part (sums to 1); empty when the run has no trace timeline."""
    window: str
    """`steps` when step markers framed the windows, `trace` when the whole capture was one window."""


def _windows(run: Run, timeline: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    steps = run.table("device_steps")
    if not steps.empty:
        return steps[["device", "step", "start_s", "end_s"]].reset_index(drop=True), "steps"
    span = timeline[timeline["kind"] != "step"]
    return pd.DataFrame({"device": [None], "step": [0], "start_s": [span["start_s"].min()], "end_s": [span["end_s"].max()]}), "trace"


def _label_window(lane_ev: pd.DataFrame, host_ev: pd.DataFrame, start: float, end: float) -> dict[str, float]:
    ev = pd.concat([lane_ev, host_ev])
    ev = ev[(ev["end_s"] > start) & (ev["start_s"] < end)]
    s, e = ev["start_s"].clip(start, end).to_numpy(float), ev["end_s"].clip(start, end).to_numpy(float)
    bounds = np.unique(np.concatenate([[start, end], s, e]))
    seg = np.diff(bounds)
    labels = np.full(len(seg), "host", dtype=object)
    for kind in reversed(("program", "input", "compile")):  # lower priority first, overwritten later
        m = (ev["kind"] == kind).to_numpy()
        cov = coverage(bounds, s[m], e[m])
        labels[cov > 0] = "device_idle" if kind == "program" else kind
    for kind in reversed(OP_CLASSES):
        m = (ev["kind"] == kind).to_numpy()
        labels[coverage(bounds, s[m], e[m]) > 0] = kind
    return {p: float(seg[labels == p].sum()) for p in PARTS}


def analyze_breakdown(run: Run) -> Breakdown:
    """Breakdown per step for every device lane of the trace timeline."""
    tl = run.table("timeline")
    if tl.empty:
        return Breakdown(per_step=pd.DataFrame(columns=["lane", "step", "step_s", *PARTS]), fractions={}, window="none")
    windows, how = _windows(run, tl)
    host = tl[tl["kind"].isin(["compile", "input"])]
    lanes = [ln for ln in tl["lane"].unique() if not str(ln).endswith("host")]
    rows = []
    for lane in lanes:
        lane_ev = tl[(tl["lane"] == lane) & tl["kind"].isin([*OP_CLASSES, "program"])]
        own = windows[windows["device"] == lane] if (windows["device"] == lane).any() else windows.drop_duplicates("step")
        for w in own.itertuples(index=False):
            parts = _label_window(lane_ev, host, float(w.start_s), float(w.end_s))
            rows.append({"lane": lane, "step": int(w.step), "step_s": float(w.end_s - w.start_s), **parts})
    per_step = pd.DataFrame(rows, columns=["lane", "step", "step_s", *PARTS])
    total = per_step["step_s"].sum()
    fractions = {p: float(per_step[p].sum() / total) for p in PARTS} if total > 0 else {}
    return Breakdown(per_step=per_step, fractions=fractions, window=how)
