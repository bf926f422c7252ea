"""A single run a side: an interval over its steps that respects their autocorrelation (batch means).

Steps of one run are not independent: a slow stretch (a host stall, a recompile burst, a noisy
neighbour) spans several consecutive steps, so Welch on per-step values calls a 0.5 % difference
over thousands of steps "faster" with a tight interval. Batch means (Law & Kelton; Fishman) cuts
each run's steps, in order, into `batches` contiguous batches and treats the batch means as the
sample: correlation inside a batch no longer shrinks the standard error, and the t interval has
(batches - 1) degrees of freedom a side, combined by Welch-Satterthwaite.

- `mean` (all-in step time): the estimate is the ratio of the runs' plain means (total wall time /
  steps, exactly the all-in time), the interval by the delta method on the log of that ratio.
- `geometric` (steady step time): the estimate is the ratio of geometric means of the steps, the
  batch means taken of the log times (as `welch.compare_samples` does with per-run values).

Run-to-run noise is not in this interval: one run a side cannot measure it (`--repeat` can).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tpu_perf.analyzers.welch import Comparison, t_quantile

MAX_BATCHES = 20
"""Batches per run at most: 20 keeps each batch long (long-range correlation averages out in it)."""
MIN_BATCH = 2
"""Steps per batch at least: with fewer steps than 2 x 2 a run gets no interval."""
METHOD = "batch means"


def batches(values: Sequence[float], *, log: bool) -> np.ndarray:
    """Means of up to `MAX_BATCHES` contiguous batches of (at least `MIN_BATCH`) steps, in order;
    the last batch takes the remainder. Empty when the run has fewer than 2 batches' worth."""
    x = np.asarray(values, dtype=float)
    x = np.log(x) if log else x
    count = min(MAX_BATCHES, x.size // MIN_BATCH)
    if count < 2:
        return np.empty(0)
    edges = np.linspace(0, x.size, count + 1).astype(int)
    return np.array([x[a:b].mean() for a, b in zip(edges[:-1], edges[1:], strict=True)])


def compare_runs(baseline: Sequence[float], candidate: Sequence[float], *, alpha: float, geometric: bool) -> Comparison | None:
    """candidate / baseline with a batch-means interval (each end a one-sided 1 - alpha bound);
    None when either run has too few steps for two batches."""
    a, b = batches(baseline, log=geometric), batches(candidate, log=geometric)
    if a.size < 2 or b.size < 2:
        return None
    if geometric:
        d = float(np.mean(np.log(candidate)) - np.mean(np.log(baseline)))
        va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    else:
        ma, mb = float(np.mean(baseline)), float(np.mean(candidate))
        d = math.log(mb / ma)
        va, vb = float(a.var(ddof=1)) / a.size / ma**2, float(b.var(ddof=1)) / b.size / mb**2  # delta method
    se = math.sqrt(va + vb)
    pooled = math.sqrt((va * a.size + vb * b.size) / 2)
    if se == 0:
        return Comparison(ratio=math.exp(d), low=math.exp(d), high=math.exp(d), log_se=0.0, df=None, log_sd_pooled=0.0)
    df = (va + vb) ** 2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1))
    half = t_quantile(1 - alpha, df) * se
    return Comparison(ratio=math.exp(d), low=math.exp(d - half), high=math.exp(d + half), log_se=se, df=df, log_sd_pooled=pooled)
