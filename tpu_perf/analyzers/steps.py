"""Step-time statistics: warm-up, steady state, throughput.

A step's `duration_s` is the wall-clock iteration (consecutive steps tile the loop), so the median
step, steps/s, tokens/s, achieved TFLOP/s and MFU are what the loop delivers; unless the loop runs
ahead of the device (most iterations return at dispatch): then the step time (`step_s`) is the
device's pace from its ready stamps, or the mean iteration (`step_time`). `device_s` is the
step's device view (dispatch to outputs ready) where the collector knows it; the gap between the
two medians is host time per iteration: input work, syncs, logging.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.analyzers.all_in import AllIn, Exclusion, all_in, needs_all_in
from tpu_perf.store import Run
from tpu_perf.store.layout import source_rank


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Steady state excludes warm-up steps, steps that compiled and steps inside the trace window.

    `iteration_*_s` statistics are of the steady iterations; `device_median_s` of the device time in
    them (None where the collector cannot see device time, e.g. PyTorch); `host_median_s` the median
    of iteration minus device time per step. `step_s` is the run's one headline step time: every
    rate divides by it and every surface shows it (`step_basis` says what it is)."""

    count: int
    warmup: int
    steady: int
    compiled_after_warmup: int
    traced: int
    source: str | None
    iteration_median_s: float | None
    iteration_mean_s: float | None
    iteration_p10_s: float | None
    iteration_p90_s: float | None
    iteration_min_s: float | None
    iteration_max_s: float | None
    device_median_s: float | None
    host_median_s: float | None
    total_s: float | None
    steps_per_s: float | None
    tokens_per_step: int | None
    tokens_per_s: float | None
    note: str | None = None
    """Said when the statistics are less than they look (e.g. only traced steps were left)."""
    device_reason: str | None = None
    """Why `device_median_s` is None, when it is."""
    interleaved: int = 0
    """Steps that also ran an eval or a checkpoint (flagged while recording): left out of steady state."""
    micro_batches: int | None = None
    """Micro-batches per step when a step is an optimizer update over several (gradient
    accumulation: optax.MultiSteps, a hand-written loop, backward() calls per optimizer step);
    None where the collector did not see how many."""
    all_in_s: float | None = None
    """Wall time per step over every step after the first (`analyzers.all_in`): recompiles and evals
    included, not the extra time of tpu-perf's own trace window and FLOP count. The headline
    (`step_s`, basis `all-in`) where the steady sample is too small or leaves out too much."""
    all_in_steps: int = 0
    all_in_tool_steps: int = 0
    """Steps after the first whose extra time the all-in time leaves out as tpu-perf's own (its trace
    window or FLOP count, `all_in.tool_steps`): counted at the step time, or where the loop runs
    ahead the device work that finished in them (`all_in.counted_durations`)."""
    call_median_s: float | None = None
    """Median seconds per steady step the loop spent inside calls of jitted functions (dispatch,
    argument flattening, framework wrappers); None where the collector does not see the calls (PyTorch)."""
    loop_median_s: float | None = None
    """Median seconds per steady step of the loop's own host work: neither inside a jitted call nor
    blocked on the device (the input pipeline, augmentation, logging); None where not seen."""
    loop_low_s: float | None = None
    """The least `loop_s` of the steady steps: what a handful of them shows for sure (a stray
    iteration, a sync or a pause, lengthens one; none shortens it)."""
    call_loop_steps: int = 0
    """Steady steps with `call_s` and `loop_s` known: the sample of `call_median_s` and `loop_median_s`."""
    cpu_median_s: float | None = None
    """Median CPU time of the process (every thread) per steady step (`cpu_s`: over each iteration;
    the mean where the loop runs ahead, as the CPU work of queued steps lands in other iterations).
    `check --timing cpu` compares it on a CPU runner, where a busy neighbour stretches wall time far
    more (docs/ci.md, "Timing on a shared CPU"); None where the run did not record it."""
    runs_ahead: bool = False
    """The loop queues steps ahead of the device: most iterations return at dispatch and a sync (or
    the end) pays for the queued steps, so the median iteration is a dispatch time, not a step."""
    step_s: float | None = None
    """The run's headline step time, chosen once (`headline_step_time`): every rate divides by it
    (steps/s, tokens/s, achieved TFLOP/s, MFU) and every surface shows it (report, `ls`, the
    dashboard, the notebook, `check`, `history`). The steady step time (`steady_step_s`), unless the
    steady sample is too small or most of the run's time lies outside it: then the all-in time."""
    step_basis: str = "median iteration"
    """What `step_s` is: `median iteration`, `device pace`, `mean iteration` (the steady step time,
    `step_time`) or `all-in` (`all_in_s`, `step_basis_reason` says why)."""
    step_basis_steps: int = 0
    """The steps `step_s` stands on."""
    step_basis_reason: str | None = None
    """Why the headline is the all-in time (`all_in.needs_all_in`); None on a steady basis."""
    outside_share: float | None = None
    """What decides the basis beside the steady sample's size: the share of the time after warm-up
    that recompiles and evals take (where the step time is the device's pace, the share its pace
    does not account for); over 25 %: the headline is the all-in time."""
    steady_step_s: float | None = None
    """The steady-state step time (`step_time`): the median steady iteration, or where the loop runs
    ahead of the device its pace (ready stamps) or the mean iteration; `steady_basis` says which."""
    steady_basis: str = "median iteration"
    """What `steady_step_s` is: `median iteration`, `device pace` or `mean iteration`."""
    excluded: tuple[Exclusion, ...] = ()
    """What the steady sample leaves out, per reason: how many steps and how much wall time."""
    excluded_share: float | None = None
    """Share of the time after the first step that the steady sample leaves out."""


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
    if not (start.is_monotonic_increasing and start.is_unique):
        steps = steps.sort_values("start_time_s")
    return _mark_prefills(steps.reset_index(drop=True), run.table("requests"))


def _mark_prefills(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """A `prefill` column: the interleaved steps whose iteration holds a generation request's start
    (its prefill ran between two decode steps: collectors/jax/prefill.py), not an eval; and, where
    the decode step's own call was the prefill (no first-token time of its own), that step."""
    if requests.empty or "start_time_s" not in requests:
        return steps
    own = requests["first_token_time_s"].isna() if "first_token_time_s" in requests else pd.Series(False, index=requests.index)
    if "interleaved" not in steps and not own.any():
        return steps
    interleaved = _flags(steps["interleaved"].fillna(False)) if "interleaved" in steps else np.zeros(len(steps), dtype=bool)
    step_start, step_end = steps["start_time_s"].to_numpy(dtype=float), steps["end_time_s"].to_numpy(dtype=float)
    prefill = np.zeros(len(steps), dtype=bool)
    for starts, alone in ((requests.loc[~own, "start_time_s"], False), (requests.loc[own, "start_time_s"], True)):
        starts = np.sort(starts.to_numpy(dtype=float))
        holds = np.searchsorted(starts, step_end, side="left") > np.searchsorted(starts, step_start, side="left")
        prefill |= holds if alone else holds & interleaved
    return steps.assign(prefill=prefill) if prefill.any() else steps


JAX_SOURCES = ("auto:jit", "auto:pmap")
TORCH_SOURCES = ("auto:optimizer", "auto:backward")


def step_framework(run: Run) -> str | None:
    """The framework whose calls made the steps: by the step source (a jitted or pmapped function is
    JAX's, an optimizer step or backward() PyTorch's), else the one the run imported. A script can
    import both (Keras on torch imports jax; a Flax model from transformers imports torch), and a
    sentence about the other's steps would be wrong. Where the source says nothing (explicit marks,
    annotations) and both were imported: PyTorch (`torch`)."""
    steps = run_steps(run)
    source = str(steps["source"].iloc[-1]) if not steps.empty and "source" in steps else ""
    if source.startswith(JAX_SOURCES):
        return "jax"
    if source.startswith(TORCH_SOURCES):
        return "torch"
    frameworks = run.manifest.get("frameworks") or []
    if {"torch", "pytorch"} & set(frameworks):
        return "torch"
    return "jax" if "jax" in frameworks else (frameworks[0] if frameworks else None)


def warmup_count(steps: pd.DataFrame, override: int | None = None) -> int:
    """Warm-up steps: the leading steps that compiled, at least one (the first step pays for
    compilation and caches), but only the first when they are most of the run (a shape that
    changes at nearly every step is the defect, not a warm-up: 19 of 20 steps of a loop that queues
    ahead compiled, each holding the next batch's `jnp.ones` or the step's compile). `override`
    (`--warmup-steps`) wins. The one definition: the step statistics, the recompile count, the
    advisor, the charts and `check` read it through `run_warmup`."""
    if steps.empty:
        return 0
    if override is not None:
        return min(int(override), len(steps))
    compiled = steps["compiled"].to_numpy(dtype=bool)
    leading = len(compiled) if compiled.all() else int(np.argmin(compiled))
    warmup = min(max(1, leading), len(steps))
    return 1 if len(steps) > 1 and 2 * warmup > len(steps) else warmup


def run_warmup(run: Run) -> int:
    """The run's warm-up steps (`warmup_count` of its steps, with its `--warmup-steps`)."""
    return warmup_count(run_steps(run), (run.manifest.get("config") or {}).get("warmup_steps"))


def steady_mask(steps: pd.DataFrame, warmup: int) -> pd.Series:
    """Steps after warm-up that did not compile, and (when any is left) that are not the tail step
    and that tpu-perf did no extra work in; when only such steps are left they are kept, and
    `StepStats.note` says so."""
    mask = (np.arange(len(steps)) >= warmup) & ~_flags(steps["compiled"])
    if "tail" in steps:  # the last step: no next step ended its iteration
        tail = steps["tail"].eq(True).to_numpy()
        if (mask & ~tail).any():
            mask &= ~tail
    extra = _extra_work(steps)
    if (mask & ~extra).any():
        mask &= ~extra
    return pd.Series(mask, index=steps.index)


def _extra_work(steps: pd.DataFrame) -> np.ndarray:
    """Steps with extra work in them: tpu-perf's (its trace window, a FLOP-counting step) or the
    script's (an interleaved eval or checkpoint, a request's prefill)."""
    extra = np.zeros(len(steps), dtype=bool)
    for column in ("traced", "instrumented", "interleaved", "prefill"):
        if column in steps:
            flags = steps[column]
            extra |= _flags(flags if flags.dtype == bool else flags.fillna(False))
    return extra


def _device_view(steps: pd.DataFrame, mask: np.ndarray) -> tuple[float | None, float | None, int]:
    """Medians of device time and of host time (iteration minus device) over the steady steps that
    have a device time, and how many have one; no medians when under half of them do (a median
    of a few steps seen by chance would stand for a run that was not seen)."""
    if "device_s" not in steps:
        return None, None, 0
    device = pd.to_numeric(steps["device_s"], errors="coerce").to_numpy(dtype=float)
    known = mask & ~np.isnan(device)
    seen = int(known.sum())
    if not seen or 2 * seen < int(mask.sum()):
        return None, None, seen
    host = steps["duration_s"].to_numpy(dtype=float)[known] - device[known]
    return float(np.median(device[known])), float(np.median(np.maximum(host, 0.0))), seen


def _column_median(steps: pd.DataFrame, mask: np.ndarray, name: str, stat: Callable[[np.ndarray], Any] = np.median) -> float | None:
    """Median (or `stat`) of a per-step column over the steady steps; None when under half of them have it."""
    if name not in steps:
        return None
    values = pd.to_numeric(steps[name], errors="coerce").to_numpy(dtype=float)
    known = mask & ~np.isnan(values)
    if not known.any() or 2 * int(known.sum()) < int(mask.sum()):
        return None
    return float(stat(values[known]))


def _known(steps: pd.DataFrame, mask: np.ndarray, *names: str) -> int:
    """Steady steps with every one of `names` known."""
    known = mask.copy()
    for name in names:
        if name not in steps:
            return 0
        known &= ~np.isnan(pd.to_numeric(steps[name], errors="coerce").to_numpy(dtype=float))
    return int(known.sum())


def _device_unknown(run: Run, seen: int = 0, steady: int = 0) -> str:
    if seen:
        return f"the device time was seen for only {seen} of {steady} steady steps; " + _device_unknown(run)
    if run.manifest.get("imported"):
        return "the trace's step markers are the host's, not the device's"
    framework = step_framework(run)
    if framework == "jax":
        return "the loop never waits for a step's outputs, so when the device finished is not seen; a sync on an output (float(loss), jax.block_until_ready) shows it"
    if framework in ("torch", "pytorch"):
        return "PyTorch's device time per step is not measured"
    return "no device work was seen"


SHARED_CORES = 0.1
"""Share of the iteration the loop's own host work must take before a CPU run's note says the
device time includes contention for the cores."""


def _shared_cores(run: Run, loop_s: float | None, median_s: float | None, device_s: float | None) -> str | None:
    """On XLA:CPU the device is this machine's cores, and the loop's own work (numpy augmentation,
    a Python input pipeline) runs on the same cores: the programs run slower than they would alone
    (measured 1.05-1.5x on 2 cores with numpy augmentation, no slower with the loop pinned to
    another core; docs/traces.md). A TPU or GPU does not share the host's cores."""
    platform = ((run.manifest.get("hardware") or {}).get("platform") or "").lower()
    if platform != "cpu" or not loop_s or not median_s or device_s is None or loop_s < SHARED_CORES * median_s:
        return None
    return (f"XLA:CPU runs the device's programs on this machine's cores: where the loop's own host work "
            f"({loop_s * 1e3:.3g} ms per step) computes rather than waits (numpy augmentation, not a storage wait), "
            f"it slows them (1.05-1.5x measured on 2 cores), and the device time includes that; a TPU or GPU does not share the host's cores")


RUN_AHEAD_PACE_OVER_MEDIAN = 2.0
"""tpu-perf: the device finishing a step every 2x the median iteration or slower means the host
queues steps ahead of it (JAX's and CUDA's asynchronous dispatch): most iterations return at
dispatch, and the queued steps are paid for at a sync (`float(loss)` every N steps) or at the end.
A loop that syncs every step, or whose host is the bottleneck, finishes steps at its iteration's pace."""
RUN_AHEAD_MEAN_OVER_MEDIAN = 3.0
"""tpu-perf: without ready stamps (PyTorch), steady iterations whose mean is over 3x their median are
two kinds, not one: dispatches, and syncs that pay for the queued steps (examples/jax_transformer.py:
median 0.46 ms, mean 190 ms per step)."""
RUN_AHEAD_WAITED = 0.5
"""Share of the long iterations' time spent blocked on the device (where the collector times the
waits) for them to be syncs paying for queued steps, not host stalls (a checkpoint every N steps)."""
PACE_MIN_STEPS = 3
"""Steady steps the device pace must stand on."""
RUN_AHEAD_MIN_SYNCS = 2
"""Long iterations the mean-over-median rule needs: syncs paying for queued steps recur (every N
steps); one slow iteration among a few is a hiccup (a loaded machine: 17.5 ms among 1-5 ms steps of
a PyTorch CPU loop once read as running ahead)."""


@dataclass(frozen=True)
class StepTime:
    """The step time every rate divides by, and what it stands on."""

    value: float | None
    basis: str
    """`median iteration`, `device pace` (ready stamps: the loop runs ahead) or `mean iteration` (the loop runs ahead, no stamps)."""
    steps: int
    """The steps it stands on."""

    @property
    def runs_ahead(self) -> bool:
        return self.basis != "median iteration"


def ran_ahead(steps: pd.DataFrame, *, slack_s: float = 0.001) -> bool:
    """Whether the host ran ahead of the device: most of `steps` whose outputs were seen ready (the
    JAX collector's stamps) became ready after their iterations ended (plus `slack_s`), so the device
    ran them outside their iterations. False without stamps."""
    if "ready_time_s" not in steps:
        return False
    ready = pd.to_numeric(steps["ready_time_s"], errors="coerce").to_numpy(float)
    known = ~np.isnan(ready)
    late = ready[known] > steps["end_time_s"].to_numpy(float)[known] + slack_s
    return bool(known.any()) and 2 * int(late.sum()) > int(known.sum())


def kept_pace(steps: pd.DataFrame, timed: np.ndarray) -> bool:
    """Whether the stamps say the device kept pace with the loop: most of the `timed` steps have a
    ready stamp, and most of those were ready within their own iteration (a loop synced every step).
    Its long iterations are then stalls, not syncs paying for steps queued ahead."""
    if "ready_time_s" not in steps or "end_time_s" not in steps:
        return False
    sample = steps[timed]
    stamped = int(pd.to_numeric(sample["ready_time_s"], errors="coerce").notna().sum())
    return 2 * stamped > len(sample) and not ran_ahead(sample)


def pace_by_step(steps: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """Seconds per step at which the device finished each step (NaN where not known): between
    steps whose outputs were seen ready (the JAX collector's stamps), the time between the stamps
    over the steps finished in between, for spans of steady steps only (not tpu-perf's trace window,
    an eval, warm-up or the tail). What the step-time charts draw for a loop that runs ahead."""
    pace = np.full(len(steps), np.nan)
    if "ready_time_s" not in steps:
        return pace
    ready = pd.to_numeric(steps["ready_time_s"], errors="coerce").to_numpy(dtype=float)
    stamped = np.flatnonzero(~np.isnan(ready))
    # a span holds the steps finished after step i up to step j; a hiccup in step i's iteration (an
    # eval, tpu-perf's trace stop) delays the next step's end, so step i must be steady too
    for i, j in zip(stamped[:-1], stamped[1:], strict=True):
        if mask[i:j + 1].all():
            pace[i + 1:j + 1] = (ready[j] - ready[i]) / (j - i)
    return pace


def pace_samples(steps: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """The known values of `pace_by_step`, in order: their mean is the device's pace; `check` takes
    them as the samples of a loop that runs ahead."""
    pace = pace_by_step(steps, mask)
    return pace[~np.isnan(pace)]


def device_pace(steps: pd.DataFrame, mask: np.ndarray) -> tuple[float, float, int] | None:
    """The device's seconds per step (`pace_samples`' mean), its median (what decides whether the
    loop runs ahead: one stalled step among a few synced ones raises the mean, not the median) and
    how many steps it stands on; None under PACE_MIN_STEPS steps."""
    samples = pace_samples(steps, mask)
    if samples.size < PACE_MIN_STEPS or samples.sum() <= 0:
        return None
    return float(samples.mean()), float(np.median(samples)), int(samples.size)


def can_run_ahead(run: Run) -> bool:
    """Whether the host can queue steps ahead of the device: not PyTorch on a CPU, whose ops run on
    the calling thread as they are called (JAX's CPU dispatch is asynchronous, a GPU's or TPU's too)."""
    platform = str((run.manifest.get("hardware") or {}).get("platform") or "").lower()
    return not (platform == "cpu" and step_framework(run) == "torch")


def step_time(steps: pd.DataFrame, mask: np.ndarray, *, ahead_possible: bool = True) -> StepTime:
    """The median steady iteration, unless the loop runs ahead of the device (`ahead_possible`, see
    `can_run_ahead`): then the device's pace where ready stamps give it, else the mean iteration
    (the wall time per step)."""
    durations = steps["duration_s"].to_numpy(dtype=float)
    timed = mask & ~np.isnan(durations)
    if not timed.any():
        return StepTime(None, "median iteration", 0)
    median = float(np.median(durations[timed]))
    if not ahead_possible:
        return StepTime(median, "median iteration", int(timed.sum()))
    pace = device_pace(steps, mask)
    if pace is not None:
        mean_pace, median_pace, samples = pace
        if median_pace > RUN_AHEAD_PACE_OVER_MEDIAN * median:
            return StepTime(mean_pace, "device pace", samples)
        return StepTime(median, "median iteration", int(timed.sum()))
    mean = float(np.mean(durations[timed]))
    if timed.sum() >= 3 and mean > RUN_AHEAD_MEAN_OVER_MEDIAN * median and not kept_pace(steps, timed):
        waits = pd.to_numeric(steps["wait_s"], errors="coerce").to_numpy(dtype=float)[timed] if "wait_s" in steps else None
        d = durations[timed]
        long = d > mean if waits is None else (d > mean) & ~np.isnan(waits)
        if int((d > mean).sum()) < RUN_AHEAD_MIN_SYNCS:
            return StepTime(median, "median iteration", int(timed.sum()))
        if waits is None or not long.any() or float(waits[long].sum()) >= RUN_AHEAD_WAITED * float(d[long].sum()):
            return StepTime(mean, "mean iteration", int(timed.sum()))
    return StepTime(median, "median iteration", int(timed.sum()))


def _flags(column: pd.Series) -> np.ndarray:
    """`column.astype(bool)` as an array (a bool column as it is: 10k-step runs, many runs)."""
    return column.to_numpy() if column.dtype == bool else column.astype(bool).to_numpy()


def analyze_steps(run: Run, *, warmup_steps: int | None = None) -> StepStats:
    steps = run_steps(run)
    config = run.manifest.get("config") or {}
    tokens = config.get("tokens_per_step")
    warmup = warmup_count(steps, warmup_steps if warmup_steps is not None else config.get("warmup_steps"))
    if steps.empty:
        return StepStats(count=0, warmup=0, steady=0, compiled_after_warmup=0, traced=0, source=None, iteration_median_s=None, iteration_mean_s=None, iteration_p10_s=None, iteration_p90_s=None, iteration_min_s=None, iteration_max_s=None, device_median_s=None, host_median_s=None, total_s=None, steps_per_s=None, tokens_per_step=tokens, tokens_per_s=None)
    mask = steady_mask(steps, warmup).to_numpy()
    all_durations = steps["duration_s"].to_numpy(dtype=float)
    durations = all_durations[mask & ~np.isnan(all_durations)]
    step = step_time(steps, mask, ahead_possible=can_run_ahead(run))
    ahead = step.runs_ahead
    device_median, host_median, device_seen = (None, None, 0) if ahead else _device_view(steps, mask)
    after = steps.iloc[warmup:]
    own_work = 0 if run.manifest.get("imported") else int((mask & _extra_work(steps)).sum())
    note = f"every steady step ran inside tpu-perf's trace window or FLOP count, or an eval: the statistics include those {own_work} slower steps (record more steps, or move --trace-steps)" if own_work else None
    accumulation = run.manifest.get("accumulation") or {}
    loop_median = _column_median(steps, mask, "loop_s")
    shared = _shared_cores(run, loop_median, float(np.median(durations)) if durations.size else None, device_median)
    note = "; ".join(n for n in (note, accumulation.get("note"), shared) if n) or None

    def stat(fn: object) -> float | None:
        return float(fn(durations)) if durations.size else None  # type: ignore[operator]

    median = stat(np.median)
    whole = all_in(steps, mask, warmup, runs_ahead=ahead, step_s=step.value)
    excluded_share = _paced_excluded_share(step, whole) if step.basis == "device pace" else whole.excluded_share
    headline = headline_step_time(step, whole, int(durations.size))
    notes = (_ahead_note(median, step) if ahead else None, _all_in_note(headline) if headline.basis == "all-in" else None, note)
    return StepStats(
        count=len(steps),
        warmup=warmup,
        steady=int(durations.size),
        compiled_after_warmup=int(after["compiled"].astype(bool).sum()),
        traced=int(steps["traced"].astype(bool).sum()) if "traced" in steps else 0,
        source=str(steps["source"].iloc[0]),
        iteration_median_s=median,
        iteration_mean_s=stat(np.mean),
        iteration_p10_s=stat(lambda d: np.percentile(d, 10)),
        iteration_p90_s=stat(lambda d: np.percentile(d, 90)),
        iteration_min_s=stat(np.min),
        iteration_max_s=stat(np.max),
        device_median_s=device_median,
        host_median_s=host_median,
        total_s=float(np.nansum(all_durations)),
        steps_per_s=1.0 / headline.value if headline.value else None,
        tokens_per_step=tokens,
        tokens_per_s=tokens / headline.value if (tokens and headline.value) else None,
        note="; ".join(n for n in notes if n) or None,
        device_reason=None if device_median is not None else (_AHEAD_DEVICE if ahead else _device_unknown(run, device_seen, int(mask.sum()))),
        interleaved=int(_flags(steps["interleaved"].fillna(False)).sum()) if "interleaved" in steps else 0,
        micro_batches=accumulation.get("micro_batches"),
        all_in_s=whole.all_in_s,
        all_in_steps=whole.all_in_steps,
        all_in_tool_steps=whole.tool_steps,
        excluded=whole.exclusions,
        excluded_share=excluded_share,
        call_median_s=_column_median(steps, mask, "call_s"),
        loop_median_s=loop_median,
        loop_low_s=_column_median(steps, mask, "loop_s", np.min),
        call_loop_steps=_known(steps, mask, "call_s", "loop_s"),
        cpu_median_s=_column_median(steps, mask, "cpu_s", np.mean if ahead else np.median),
        runs_ahead=ahead,
        step_s=headline.value,
        step_basis=headline.basis,
        step_basis_steps=headline.steps,
        step_basis_reason=headline.reason,
        outside_share=headline.outside_share,
        steady_step_s=step.value,
        steady_basis=step.basis,
    )


@dataclass(frozen=True)
class Headline:
    """The run's one step time (`StepStats.step_s`), what it is and why."""

    value: float | None
    basis: str
    steps: int
    reason: str | None = None
    outside_share: float | None = None


def headline_step_time(step: StepTime, whole: AllIn, steady: int) -> Headline:
    """The steady step time (`step_time`), unless the steady sample is too small or the program's
    recompiles and evals take most of the time after warm-up (`all_in.needs_all_in` on
    `AllIn.outside_share`; where the step time is the device's pace, the share of the time after
    warm-up its pace does not account for): then the all-in time, the wall time per step the loop
    delivered. The same decision picks the basis of `check`'s speed verdict, so the headline and the
    verdict stand on the same numbers. Warm-up is never the reason: every convention leaves it out."""
    share = whole.outside_share
    if step.basis == "device pace" and step.value is not None and whole.after_warmup_s:
        share = max(0.0, 1.0 - step.value * whole.after_warmup_steps / whole.after_warmup_s)
    reason = needs_all_in(steady, share, of="of the time after warm-up (recompiles, evals)")
    if reason is not None and whole.all_in_s is not None:
        return Headline(whole.all_in_s, "all-in", whole.all_in_steps, reason, share)
    return Headline(step.value, step.basis, step.steps, outside_share=share)


def _all_in_note(headline: Headline) -> str:
    return (f"the step time is the all-in time, the wall time per step over the {headline.steps} steps after the first: "
            f"{headline.reason}, so a steady median would stand for a run that was not seen")


def _paced_excluded_share(step: StepTime, whole: AllIn) -> float | None:
    """Where the step time is the device's pace, the share of the wall time after the first step
    that its spans leave out (a loop that runs ahead pays for its steps in a few long iterations,
    so the left-out iterations' own share says nothing of what the pace covers). Shown with the
    exclusions; the headline's basis reads `outside_share`, which leaves tpu-perf's own steps out."""
    if not whole.all_in_s or step.value is None:
        return whole.excluded_share
    return max(0.0, 1.0 - step.value * step.steps / (whole.all_in_s * whole.all_in_steps))


_AHEAD_DEVICE = ("the loop runs ahead of the device: an iteration returns at dispatch or waits for steps queued "
                 "before it, so no iteration holds one step's device time (the trace breakdown splits the step)")


def _ahead_note(median: float | None, step: StepTime) -> str:
    how = (f"the device finished a step every {(step.value or 0) * 1e3:.3g} ms (its ready stamps, over {step.steps} steps)" if step.basis == "device pace"
           else f"the syncs pay for the queued steps: the mean iteration, {(step.value or 0) * 1e3:.3g} ms")
    return (f"the loop runs ahead of the device: most iterations return at dispatch ({(median or 0) * 1e3:.3g} ms median iteration), "
            f"so the step time is the wall time per step: {how}")
