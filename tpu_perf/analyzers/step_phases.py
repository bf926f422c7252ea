"""Each step of a run with its phase (warm-up, steady, or why it was left out of the steady
sample), when it started and, where the step time is the device's pace, the pace at that step:
what the step-time charts draw (the dashboard's run and compare pages, the notebook's report). The
phases are the report's own attribution (`all_in.step_reasons`), not a second one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tpu_perf.analyzers.all_in import REASONS, step_reasons
from tpu_perf.analyzers.steps import pace_by_step, run_steps, steady_mask
from tpu_perf.store import Run

PHASES: dict[str, str] = {"": "steady", "warmup": "warm-up", **{key: f"excluded: {label}" for key, label in REASONS if key != "warmup"}}
"""Phase label per `step_reasons` key."""


def step_phases(run: Run, warmup: int, *, paced: bool = False) -> pd.DataFrame:
    """The steps the analyzers use, with a `phase` per step (steady, warm-up, or `excluded: <why>`),
    `t_s`, when the step started, in seconds since the run started (the wall-clock x-axis), and
    `pace_s`: where the step time is the device's pace (`paced`: the report's
    `steps.steady_basis` is `device pace`), the pace at each step (`steps.pace_by_step`), else NaN.
    `warmup` is the report's `steps.warmup`."""
    steps = run_steps(run)
    if steps.empty or "duration_s" not in steps:
        return pd.DataFrame(columns=["step", "duration_s", "phase", "t_s", "pace_s"])
    mask = steady_mask(steps, warmup).to_numpy()
    phase = pd.Series([PHASES[r] for r in step_reasons(steps, mask, warmup)], index=steps.index)
    start = pd.to_numeric(steps["start_time_s"], errors="coerce") if "start_time_s" in steps else pd.Series(float("nan"), index=steps.index)
    origin = run.started_at if run.started_at is not None else start.min()
    pace = pace_by_step(steps, mask) if paced else np.full(len(steps), np.nan)
    return pd.DataFrame({"step": range(len(steps)), "duration_s": steps["duration_s"].astype(float), "phase": phase, "t_s": start.astype(float) - float(origin), "pace_s": pace})
