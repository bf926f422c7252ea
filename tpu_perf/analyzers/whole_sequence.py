"""A decode loop with no KV cache: each call feeds the whole sequence again, one position longer
than the last (collectors/jax/prefill.py marks such requests `whole_sequence`), so a token costs
work for every position before it. The decode steps' device time against the positions each fed,
fitted as a line, gives the part per position; the wall-clock iteration less that part at the mean
length is what does not grow; a cache would leave a step that feeds one position. Measured on the
run's own steps, not assumed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.analyzers.inference import run_requests
from tpu_perf.analyzers.steps import run_steps
from tpu_perf.store import Run

MIN_STEPS = 6
"""Decode steps (not compiling, not traced) needed for the fit."""


@dataclass(frozen=True, kw_only=True)
class WholeSequence:
    requests: int
    steps: int
    """Decode steps in the fit."""
    fixed_s: float
    """Per step (a wall-clock iteration), whatever its length: the loop's host work, dispatch, the
    weights' reads; the mean iteration less the per-position part at the mean length."""
    per_position_s: float
    """Per position fed: the slope of the steps' device time (else their iterations) against it."""
    mean_positions: float
    """Positions a decode step fed, on average."""

    @property
    def step_s(self) -> float:
        """A decode step as fitted at the mean length."""
        return self.fixed_s + self.per_position_s * self.mean_positions

    @property
    def cached_step_s(self) -> float:
        """A decode step that feeds one position (a cache holds the rest): the fit at length 1."""
        return self.fixed_s + self.per_position_s


def whole_sequence_decode(run: Run) -> WholeSequence | None:
    """The fit over the decode steps of the run's whole-sequence requests; None without such
    requests or with too few steps, or lengths too alike, to fit."""
    requests, _, from_steps = run_requests(run)
    if not from_steps or "whole_sequence" not in requests or not requests["whole_sequence"].fillna(False).astype(bool).any():
        return None
    steps = run_steps(run)
    starts = steps["start_time_s"].to_numpy(float)
    plain = ~np.zeros(len(steps), dtype=bool)
    for column in ("compiled", "traced", "instrumented"):
        if column in steps:
            plain &= ~steps[column].fillna(False).astype(bool).to_numpy()
    took = steps["duration_s"].to_numpy(float)
    device = pd.to_numeric(steps["device_s"], errors="coerce").to_numpy(float) if "device_s" in steps else np.full(len(steps), np.nan)
    bounds = [*requests["start_time_s"].to_numpy(float)[1:], np.inf]
    positions, times, on_device, used = [], [], [], 0
    for (_, request), upto in zip(requests.iterrows(), bounds, strict=True):
        if not bool(request.get("whole_sequence")) or pd.isna(request.get("prompt_positions")):
            continue
        used += 1
        held = int(np.searchsorted(starts, request["start_time_s"], side="left"))  # the prefill's own step
        mine = np.flatnonzero((np.arange(len(starts)) > held) & (starts < upto))
        fed = float(request["prompt_positions"]) + np.arange(1, len(mine) + 1)
        keep = plain[mine]
        positions += fed[keep].tolist()
        times += took[mine][keep].tolist()
        on_device += device[mine][keep].tolist()
    if len(times) < MIN_STEPS or np.ptp(positions) < 3:
        return None
    # the cost per position is the device's (the loop's host work between calls does not grow with
    # the sequence and stays with a cache); where the device time is unseen, the iteration's
    fed, work = np.asarray(positions), np.asarray(on_device)
    seen = np.isfinite(work)
    if seen.sum() < MIN_STEPS:
        work, seen = np.asarray(times), np.ones(len(times), dtype=bool)
    slope = float(max(np.polyfit(fed[seen], work[seen], 1)[0], 0.0))
    mean_positions = float(np.mean(positions))
    return WholeSequence(requests=used, steps=len(times), fixed_s=max(float(np.mean(times)) - slope * mean_positions, 0.0), per_position_s=slope, mean_positions=mean_positions)
