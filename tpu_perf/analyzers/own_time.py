"""tpu-perf's own time inside a script's steps: where its trace window started or stopped (the
collectors flag that step `instrumented`), the step took longer than a plain one by tpu-perf's
own work. One rule for every request path (a decode loop's steps, a whole request per call): that
excess is left out of the requests' wall time (`inference.own_s`), where the script's own clock
holds it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _flag(steps: pd.DataFrame, column: str) -> np.ndarray:
    return steps[column].fillna(False).astype(bool).to_numpy() if column in steps else np.zeros(len(steps), bool)


def step_own_time(steps: pd.DataFrame) -> np.ndarray:
    """Each step's time beyond a plain step's median where tpu-perf started or stopped its trace in
    it (0 elsewhere, and 0 everywhere when no plain step is left to compare with). A plain step did
    not compile, hold an eval or a prefill, and tpu-perf did no work in it; a step that did both
    (the trace started where a prefill ran) counts as the script's: its excess is not told apart."""
    whole = steps["end_time_s"].to_numpy(float) - steps["start_time_s"].to_numpy(float)
    other = _flag(steps, "compiled") | _flag(steps, "interleaved") | _flag(steps, "prefill")  # the script's own extra work
    own = _flag(steps, "instrumented") & ~other
    plain = ~own & ~other & ~_flag(steps, "traced")
    if not own.any() or not plain.any():
        return np.zeros(len(steps))
    return np.where(own, np.maximum(whole - float(np.median(whole[plain])), 0.0), 0.0)


def own_time_within(steps: pd.DataFrame, start_s: float, end_s: float) -> float:
    """tpu-perf's own time in the steps that started within [start_s, end_s), no more than each
    such step's part inside that span."""
    if steps.empty:
        return 0.0
    begin = steps["start_time_s"].to_numpy(float)
    inside = np.maximum(np.minimum(steps["end_time_s"].to_numpy(float), end_s) - begin, 0.0)
    mine = (begin >= start_s) & (begin < end_s)
    return float(np.minimum(step_own_time(steps), inside)[mine].sum())
