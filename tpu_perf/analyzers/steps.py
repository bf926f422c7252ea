"""Step-time statistics: warm-up, steady state, throughput."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.store import Run
from tpu_perf.store.layout import source_rank


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Steady state excludes warm-up steps, steps that compiled and steps inside the trace window."""

    count: int
    warmup: int
    steady: int
    compiled_after_warmup: int
    traced: int
    source: str | None
    median_s: float | None
    mean_s: float | None
    p10_s: float | None
    p90_s: float | None
    min_s: float | None
    max_s: float | None
    total_s: float | None
    steps_per_s: float | None
    tokens_per_step: int | None
    tokens_per_s: float | None
    interleaved: int = 0
    """Steps that also ran an eval or a checkpoint (flagged while recording): left out of steady state."""


def run_steps(run: Run) -> pd.DataFrame:
    """The run's steps from its best source (explicit marks > annotations > automatic), in order.

    Derived once per loaded Run (every section uses it); read-only for callers."""
    return run.derived("run_steps", _best_steps)


def _best_steps(run: Run) -> pd.DataFrame:
    steps = run.steps
    if steps.empty or "source" not in steps:
        return steps
    rank_of = {source: source_rank(source) for source in steps["source"].unique()}
    if len(rank_of) > 1:
        ranks = steps["source"].map(rank_of)
        steps = steps[ranks == ranks.min()]
    start = steps["start_time_s"]
    if start.is_monotonic_increasing and start.is_unique:  # already in order (the usual case): no sort
        return steps.reset_index(drop=True)
    return steps.sort_values("start_time_s").reset_index(drop=True)


def warmup_count(steps: pd.DataFrame, override: int | None = None) -> int:
    """Leading steps that compiled, at least one (the first step pays for compilation and caches)."""
    if steps.empty:
        return 0
    if override is not None:
        return min(int(override), len(steps))
    compiled = steps["compiled"].to_numpy(dtype=bool)
    leading = len(compiled) if compiled.all() else int(np.argmin(compiled))
    return min(max(1, leading), len(steps))


def steady_mask(steps: pd.DataFrame, warmup: int) -> pd.Series:
    mask = (np.arange(len(steps)) >= warmup) & ~_flags(steps["compiled"])
    extra = np.zeros(len(steps), dtype=bool)
    for column in ("traced", "instrumented", "interleaved"):  # tpu-perf's extra work, or the script's eval/checkpoint
        if column in steps:
            flags = steps[column]
            extra |= _flags(flags if flags.dtype == bool else flags.fillna(False))
    if (mask & ~extra).any():
        mask &= ~extra
    return pd.Series(mask, index=steps.index)


def _flags(column: pd.Series) -> np.ndarray:
    """`column.astype(bool)` as an array (a bool column as it is: 10k-step runs, many runs)."""
    return column.to_numpy() if column.dtype == bool else column.astype(bool).to_numpy()


def analyze_steps(run: Run, *, warmup_steps: int | None = None) -> StepStats:
    steps = run_steps(run)
    config = run.manifest.get("config") or {}
    tokens = config.get("tokens_per_step")
    warmup = warmup_count(steps, warmup_steps if warmup_steps is not None else config.get("warmup_steps"))
    if steps.empty:
        return StepStats(count=0, warmup=0, steady=0, compiled_after_warmup=0, traced=0, source=None, median_s=None, mean_s=None, p10_s=None, p90_s=None, min_s=None, max_s=None, total_s=None, steps_per_s=None, tokens_per_step=tokens, tokens_per_s=None)
    mask = steady_mask(steps, warmup)
    durations = steps["duration_s"].to_numpy(dtype=float)[mask.to_numpy()]
    after = steps.iloc[warmup:]

    def stat(fn: object) -> float | None:
        return float(fn(durations)) if durations.size else None  # type: ignore[operator]

    median = stat(np.median)
    return StepStats(
        count=len(steps),
        warmup=warmup,
        steady=int(durations.size),
        compiled_after_warmup=int(after["compiled"].astype(bool).sum()),
        traced=int(steps["traced"].astype(bool).sum()) if "traced" in steps else 0,
        source=str(steps["source"].iloc[0]),
        median_s=median,
        mean_s=stat(np.mean),
        p10_s=stat(lambda d: np.percentile(d, 10)),
        p90_s=stat(lambda d: np.percentile(d, 90)),
        min_s=stat(np.min),
        max_s=stat(np.max),
        total_s=float(steps["duration_s"].sum()),
        steps_per_s=1.0 / median if median else None,
        tokens_per_step=tokens,
        tokens_per_s=tokens / median if (tokens and median) else None,
        interleaved=int(_flags(steps["interleaved"].fillna(False)).sum()) if "interleaved" in steps else 0,
    )
