"""Each step of a run with its phase (warm-up, steady, or excluded), when it started and, where the
loop runs ahead of the device, the device's pace at that step: what the step-time charts draw (the
dashboard's run and compare pages, the notebook's report)."""

from __future__ import annotations

import pandas as pd

from tpu_perf.analyzers.steps import can_run_ahead, pace_by_step, run_steps, steady_mask, step_time
from tpu_perf.store import Run


def step_phases(run: Run, warmup: int) -> pd.DataFrame:
    """The steps the analyzers use, with a `phase` per step (warm-up, steady, or excluded), `t_s`,
    when the step started, in seconds since the run started (the wall-clock x-axis), and `pace_s`:
    where the step time is the device's pace (the loop runs ahead, so its iterations are mostly
    dispatches), the pace at each step (`steps.pace_by_step`), else NaN."""
    steps = run_steps(run)
    if steps.empty or "duration_s" not in steps:
        return pd.DataFrame(columns=["step", "duration_s", "phase", "t_s", "pace_s"])
    steady = steady_mask(steps, warmup)
    phase = pd.Series("excluded (compiled or traced)", index=steps.index)
    phase[steady] = "steady"
    phase.iloc[:warmup] = "warm-up"
    start = pd.to_numeric(steps["start_time_s"], errors="coerce") if "start_time_s" in steps else pd.Series(float("nan"), index=steps.index)
    origin = run.started_at if run.started_at is not None else start.min()
    mask = steady.to_numpy()
    pace = pace_by_step(steps, mask) if step_time(steps, mask, ahead_possible=can_run_ahead(run)).basis == "device pace" else float("nan")
    return pd.DataFrame({"step": range(len(steps)), "duration_s": steps["duration_s"].astype(float), "phase": phase, "t_s": start.astype(float) - float(origin), "pace_s": pace})
