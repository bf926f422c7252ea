"""All-in step time and what the steady median leaves out: ONE definition, used by the report,
`tpu-perf check`, the compare page's verdict and the advisor.

- **All-in step time** (`all_in_s`): the wall time per step over every step after the first, i.e.
  the sum of the iterations of steps 2..N divided by N-1. Consecutive iterations tile the loop, so
  this is what the loop actually delivered once its first step (the one compile every run pays)
  was over: every recompile, eval and checkpoint after it is in. Steps that are tpu-perf's own cost
  and nothing of the program's (`tool_steps`: inside its trace window or FLOP count, no warm-up,
  compile or eval) count at the step time instead of their iteration: the profiler's start, stop
  and export take hundreds of ms there (a 33 ms PyTorch step read 52 ms all-in with them, a JAX
  loop's 10 ms pace 29 ms), which a plain run of the script would not pay. Where the loop runs
  ahead of the device they count the device work that finished in them (`counted_durations`): an
  iteration there pays for steps queued before it, so dropping them would drop device time.
- **Exclusions**: the steady median leaves out warm-up steps, steps that compiled after warm-up,
  steps that ran an interleaved eval or checkpoint, and steps inside tpu-perf's trace window (or
  its FLOP count). Each is stated with how many steps and how much wall time it took.
- **Basis** (`needs_all_in`): the run's headline step time is its all-in time (and a comparison
  uses all-in times), and says so, when the steady sample has fewer than `MIN_STEADY_STEPS` steps or
  its recompiles and evals after warm-up take more than `MAX_EXCLUDED_SHARE` of the time after
  warm-up (the steady median would then hide the defect it is asked about).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.analyzers.ready import ready_times
from tpu_perf.units import seconds

MIN_STEADY_STEPS = 5
"""Fewer steady steps than this: the steady median stands on too little; compare all-in."""
MAX_EXCLUDED_SHARE = 0.25
"""Excluded steps (after the first) taking more than this share of the time: compare all-in."""

REASONS: tuple[tuple[str, str], ...] = (
    ("compiled", "compiled a new program"),
    ("warmup", "warm-up"),
    ("prefill", "ran a request's prefill"),
    ("interleaved", "ran an eval, a checkpoint or an epoch's end"),
    ("traced", "inside the trace window or FLOP count"),
    ("tail", "last step, unended"),
)
"""Why a step is left out of the steady sample, in the order a step is attributed (first reason
wins): a step after the first that compiled says so, whether or not the warm-up count took it in
(leading steps that compile all count as warm-up); "last step, unended": no next step ended its
iteration, so its time is not a whole iteration."""


@dataclass(frozen=True, kw_only=True)
class Exclusion:
    """Steps left out of the steady median for one reason, and the wall time they took."""

    reason: str
    """One of `REASONS`' keys: warmup | compiled | prefill | interleaved | traced | tail."""
    label: str
    steps: int
    time_s: float


@dataclass(frozen=True, kw_only=True)
class AllIn:
    all_in_s: float | None
    """Wall time per step over every whole step after the first (the unended last iteration is not
    a step, unless the loop runs ahead); None with fewer than 2 steps."""
    all_in_steps: int
    """Steps it is over (count - 1, less an unended tail unless the loop runs ahead; 0 when unknown)."""
    tool_steps: int = 0
    """Of those, tpu-perf's own (`tool_steps`), as `counted_durations` counts them."""
    exclusions: tuple[Exclusion, ...]
    """Each non-empty reason a step was left out of the steady sample, in `REASONS` order."""
    excluded_share: float | None
    """Share of the time of the steps after the first that the steady sample leaves out."""
    outside_share: float | None = None
    """Share of the time of the steps after warm-up that the steady sample leaves out for the
    program's own recurring reasons (a step that compiled a new program, an eval or checkpoint
    interleaved): what decides whether the steady step time can stand for the run (`needs_all_in`).
    Warm-up, the unended last step and tpu-perf's own trace window are not the program's defects."""
    after_warmup_s: float | None = None
    """Wall time of the steps after warm-up as the all-in time counts them (the share's whole)."""
    after_warmup_steps: int = 0


def tool_steps(steps: pd.DataFrame, warmup: int) -> np.ndarray:
    """Steps whose extra time is tpu-perf's own: inside its trace window or FLOP count, and neither
    warm-up, nor compiling a new program, nor running an eval or checkpoint (those are the program's,
    traced or not)."""
    index = np.arange(len(steps))
    program = (index < warmup) | (_column(steps, "compiled") & (index > 0)) | _column(steps, "interleaved")
    return (_column(steps, "traced") | _column(steps, "instrumented")) & ~program


def after_first(steps: pd.DataFrame, *, runs_ahead: bool = False) -> np.ndarray:
    """The steps the all-in time is over: every whole step after the first (the last iteration,
    which no next step ended, is not a whole step, unless the loop runs ahead of the device: its
    last iteration ends when the queued steps' outputs were ready, and holds their time). One
    definition for the report and `check`."""
    mask = ~_column(steps, "tail") if not runs_ahead else np.ones(len(steps), dtype=bool)
    if len(mask):
        mask[0] = False
    return mask


def counted_durations(steps: pd.DataFrame, warmup: int, step_s: float | None, *, runs_ahead: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each step's iteration as the all-in time counts it, and the mask of tpu-perf's own steps
    (`tool_steps`; none when the step time `step_s` is unknown). Where each iteration holds its own
    step, tpu-perf's count at the step time (the steady median). Where the loop runs ahead of the
    device, an iteration holds whatever device work finished during it, so tpu-perf's count that
    part: the steps whose outputs became ready in it, at the pace `step_s`, no more than the
    iteration (the trace's start or export while the device drains the queue costs the loop
    nothing; while the device idles, it is tpu-perf's cost)."""
    durations = steps["duration_s"].to_numpy(dtype=float).copy()
    tool = tool_steps(steps, warmup) if step_s is not None else np.zeros(len(steps), dtype=bool)
    if runs_ahead and tool.any() and "ready_time_s" in steps:
        ready = ready_times(steps)
        ready = np.sort(ready[~np.isnan(ready)])
        starts, ends = steps["start_time_s"].to_numpy(dtype=float), steps["end_time_s"].to_numpy(dtype=float)
        done = np.searchsorted(ready, ends, side="right") - np.searchsorted(ready, starts, side="right")
        durations[tool] = np.minimum(durations[tool], done[tool] * step_s)
    else:
        durations[tool] = step_s
    return durations, tool


def all_in(steps: pd.DataFrame, steady: np.ndarray, warmup: int, *, runs_ahead: bool = False, step_s: float | None = None) -> AllIn:
    """All-in time and exclusions of `steps` (in order), given the steady mask, the warm-up count,
    whether the loop runs ahead of the device and its step time (`steps.step_time`)."""
    if steps.empty:
        return AllIn(all_in_s=None, all_in_steps=0, exclusions=(), excluded_share=None)
    durations = np.nan_to_num(steps["duration_s"].to_numpy(dtype=float), nan=0.0)
    left_out = ~steady
    reasons = step_reasons(steps, steady, warmup)
    exclusions = []
    for key, label in REASONS:
        mine = reasons == key
        if mine.any():
            exclusions.append(Exclusion(reason=key, label=label, steps=int(mine.sum()), time_s=float(durations[mine].sum())))
    counted, tool = counted_durations(steps, warmup, step_s, runs_ahead=runs_ahead)
    whole = after_first(steps, runs_ahead=runs_ahead)
    after = np.nan_to_num(counted[whole], nan=0.0)
    total = float(after.sum())
    value = total / after.size if after.size and total > 0 else None
    excluded = float(durations[whole & left_out & ~tool].sum())  # the program's exclusions, not tpu-perf's
    past_warmup = whole & (np.arange(len(steps)) >= warmup)
    later = float(np.nan_to_num(counted[past_warmup], nan=0.0).sum())
    recurring = float(durations[past_warmup & np.isin(reasons, ("compiled", "prefill", "interleaved"))].sum())
    return AllIn(all_in_s=value, all_in_steps=int(after.size), tool_steps=int((whole & tool).sum()), exclusions=tuple(exclusions), excluded_share=excluded / total if total > 0 else None,
                 outside_share=min(1.0, recurring / later) if later > 0 else None, after_warmup_s=later if later > 0 else None, after_warmup_steps=int(past_warmup.sum()))


def step_reasons(steps: pd.DataFrame, steady: np.ndarray, warmup: int) -> np.ndarray:
    """Each step's reason for being left out of the steady sample (a `REASONS` key, the first that
    applies), "" for a steady step: the one attribution the exclusions, the charts' phases and the
    report share. A step left out for none of them (only when the sample keeps such steps: see
    `steps.steady_mask`) is "steady" too."""
    index = np.arange(len(steps))
    flags = {
        "warmup": index < warmup,
        "compiled": _column(steps, "compiled") & (index > 0),
        "prefill": _column(steps, "prefill"),
        "interleaved": _column(steps, "interleaved"),
        "traced": _column(steps, "traced") | _column(steps, "instrumented"),
        "tail": _column(steps, "tail"),
    }
    out = np.full(len(steps), "", dtype=object)
    open_ = ~np.asarray(steady, dtype=bool)
    for key, _ in REASONS:
        mine = open_ & flags[key]
        out[mine] = key
        open_ &= ~mine
    return out


def _column(steps: pd.DataFrame, name: str) -> np.ndarray:
    if name not in steps:
        return np.zeros(len(steps), dtype=bool)
    column = steps[name]
    return (column if column.dtype == bool else column.fillna(False)).astype(bool).to_numpy()


def needs_all_in(steady: int, share: float | None, *, of: str = "of the time after the first step") -> str | None:
    """Why this run's step time must be its all-in time (the headline's basis, and `check`'s), in
    words; None when the steady step time will do. `share`: what the steady sample leaves out
    (`AllIn.outside_share`: recompiles and evals after warm-up; a baseline saved before report
    version 3 gives its `excluded_share`, `of` the time after the first step)."""
    if steady < MIN_STEADY_STEPS:
        return f"only {steady} steady step{'s' if steady != 1 else ''} (< {MIN_STEADY_STEPS})"
    if share is not None and share > MAX_EXCLUDED_SHARE:
        return f"the steps left out take {share:.0%} {of} (> {MAX_EXCLUDED_SHARE:.0%})"
    return None


def exclusions_text(exclusions: Sequence[Exclusion]) -> str:
    """"9 compiled a new program (8.470 s), 1 warm-up (910.00 ms)"; "none" when nothing was left out.
    Times as `report` and the dashboard say them (`units.seconds`): one wording on every page."""
    parts = [f"{e.steps} {e.label} ({seconds(e.time_s)})" for e in exclusions]
    return ", ".join(parts) if parts else "none"
