"""Each step's outputs-ready time, where the recorder stamped it or the device's pace gives it.

The JAX collector stamps when a step's outputs became ready, except for steps far shorter than a
few ms queued back to back, which it does not wait on one by one (collectors/jax/ready.py,
`MIN_STAMP_GAP_S`): between two stamps the device ran them one after another, so each such step
was ready at its place on the line between the stamps around it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def ready_times(steps: pd.DataFrame) -> np.ndarray:
    """`ready_time_s` per step, with the gaps between two stamps filled at the pace between them;
    NaN before the first stamp, after the last and where nothing was stamped (`steps` in order)."""
    if "ready_time_s" not in steps:
        return np.full(len(steps), np.nan)
    ready = pd.to_numeric(steps["ready_time_s"], errors="coerce").to_numpy(dtype=float)
    stamped = np.flatnonzero(~np.isnan(ready))
    if stamped.size < 2:
        return ready
    inside = np.arange(stamped[0], stamped[-1] + 1)
    filled = ready.copy()
    filled[inside] = np.interp(inside, stamped, ready[stamped])
    return filled
