"""The numbers the rules read, computed once per run: `Signals`, built by `build_signals`.

Rules never read tables or the report themselves: this module is the one adapter between the
analyzers' typed `Report` and the advisor, so a change in the report changes one function here.
Each field is None when its data is missing; `SOURCES` says where each comes from, and rules copy
that into their evidence.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.dot_dtypes import dot_flops_share_by_source_dtype
from tpu_perf.advise.finding import Evidence, ev
from tpu_perf.advise.padding import fixed_dot_dims
from tpu_perf.analyzers.cache_reads import CacheReads, cache_reads
from tpu_perf.analyzers.compiles import CompileStats, after_warmup_compiles
from tpu_perf.analyzers.flops import run_chip
from tpu_perf.analyzers.hlo import HloModule, run_hlo
from tpu_perf.analyzers.hlo_analysis import DotInfo, HloAnalysis, analyze_hlo, tile_for_chip
from tpu_perf.analyzers.inference import InferenceStats
from tpu_perf.analyzers.memory import MemoryStats
from tpu_perf.analyzers.programs import step_program
from tpu_perf.analyzers.report import Report, build_report
from tpu_perf.analyzers.steps import run_steps, run_warmup, step_framework
from tpu_perf.analyzers.traces import TraceSection
from tpu_perf.analyzers.whole_sequence import WholeSequence, whole_sequence_decode
from tpu_perf.hardware import Chip, lookup_chip
from tpu_perf.jsonio import to_jsonable
from tpu_perf.store import Run

OP_PARTS = ("matmul", "collective", "data_movement", "compute")
"""Breakdown parts in which a device op runs (analyzers/breakdown.py)."""


@dataclass(frozen=True, kw_only=True)
class Signals:
    framework: str | None
    platform: str | None
    run_chip: Chip | None
    target: Chip | None
    """The chip hardware rules judge for: `--target`, else the run's own TPU; None otherwise."""
    target_from: str | None
    # steps
    steps: int
    traced_steps: int
    trace_steps: float | None = None
    """Steps whose device work the trace holds (`ops.steps`); None: unknown."""
    trace_fix: str = "record without --no-trace"
    """What would give the run a trace window, worded from what it did (`trace_fix`): `--no-trace`
    turned it off, or the run ended before its window opened."""
    iteration_median_s: float | None
    device_median_s: float | None
    host_median_s: float | None
    step_s: float | None = None
    """The steady step time (`StepStats.steady_step_s`): the median iteration, or where the loop runs
    ahead of the device the wall time per step (its device pace, or the mean iteration). The rules
    bound their gains by shares of the steady step; the time outside it (recompiles, evals) is read
    from `after_warmup_wall_s`."""
    loop_median_s: float | None = None
    """The loop's own host time per step, outside jitted calls and device waits (JAX collector)."""
    loop_low_s: float | None = None
    """The least of those per-step times (`StepStats.loop_low_s`)."""
    loop_steps: int = 0
    """Steady steps `loop_median_s`, `loop_low_s` and `call_median_s` stand on."""
    call_median_s: float | None = None
    """Host time per step inside calls of jitted functions: dispatch and framework overhead."""
    after_warmup_wall_s: float | None
    """The iterations after warm-up, summed (the window `compile.after_warmup` counts in); a traced or
    instrumented step counts as an ordinary step plus the recompile seconds it held: its own time is
    the profiler's too (its Python tracer slows eager dispatch about 2x; the step that stops the trace
    writes it)."""
    steps_after_warmup: int | None
    # compiles (None: the recorder could not hear them: imported traces, torch-tpu)
    compiles: int | None
    compile_total_s: float | None
    late_compiles: int | None
    """The report's `compile.after_warmup`: recompiles after warm-up (analyzers/compiles.py's one
    definition: the step function, or a function compiled before; not first compiles of occasional
    functions). None: unknown (no steps, or compiles not heard)."""
    late_compile_s: float | None
    """The report's `compile.after_warmup_s`: backend compile seconds of those recompiles."""
    recompile_excess_s: float | None
    """What the steps after warm-up that recompiled took beyond a step that did not: the whole cost
    of a changed shape (compiling, and the slow paths around it), not only the compile events."""
    late_functions: dict[str, int]
    recompile_causes: list[dict[str, Any]] = field(default_factory=list)
    """What changed at the recompiles after warm-up (report `compile.after_warmup_causes`)."""
    first_compiles_after_warmup: dict[str, int]
    """The report's `compile.other_after_warmup`: compiles of functions other than the step, once at a boundary (not recompiles)."""
    step_api: str | None
    """How the step is compiled, where fixes differ from `jax.jit`: `pmap` (`auto:pmap(NAME)`), or
    the library whose wrapper jitted it (`equinox`, `flax`: the programs table's `wrapper`); None."""
    pmap_compiles: int
    """Backend compiles of pmap programs (`pmap(f)`, or `jit(_fun)`: pmap as jit of shard_map in jax
    >= 0.7): a compiled step the op-by-op rule must not call eager."""
    distinct_compiled: int
    compile_cache_events: int | None
    compile_cache_env: str | None
    """The persistent compilation cache directory the run used (jax.config at the end, else the env)."""
    step_program: bool
    jitted_functions: int | None
    """Functions the script wrapped in `jax.jit` (JAX collector); 0 means every op ran eagerly."""
    # torch.compile
    torch_graphs: int | None
    graph_breaks: int | None
    graph_break_reasons: list[dict[str, Any]]
    torch_recompile_reasons: list[dict[str, Any]]
    # host syncs (JAX collector counters; the PyTorch collector's device-to-host transfers)
    step_calls: int | None
    fetched_step_calls: int | None
    torch_syncs: int | None = None
    """Device-to-host transfers (`.item()`, `.cpu()`, `.tolist()`, `.numpy()`, printing a tensor)
    during the recorded steps (collectors/torch/syncs.py); None where not counted."""
    torch_sync_steps: int | None = None
    """The run's recorded steps (steps.count), the denominator of transfers per step."""
    torch_sync_callers: dict[str, int] = field(default_factory=dict)
    """Transfers per top-level package of the code that made them (`__main__`: the script)."""
    torch_steps_with_sync: tuple[int, int] | None = None
    """(steps with at least one transfer, steps counted over): the share that waits for the device,
    as the JAX collector's fetched step calls; None from a recorder that did not count them."""
    batch_size: int | None = None
    fixed_dims: dict[str, frozenset[str]] = field(default_factory=dict)
    """Per step-program dot: which of m, n, k the user cannot change (advise/padding.py)."""
    # HLO of the step program
    hlo: HloAnalysis | None
    hlo_target: HloAnalysis | None
    """The same program analysed with the target's MXU tile."""
    hlo_instructions: int | None
    max_dot_repeats: int | None
    step_compile_s: float | None
    argument_bytes: int | None
    output_bytes: int | None
    alias_bytes: int | None
    dot_intensity_bf16: float | None
    dot_source_dtype_share: dict[str, float]
    """Matmul FLOP shares by the dtype the program asked for (advise/dot_dtypes.py)."""
    # trace
    breakdown: dict[str, float]
    long_host_share: float | None = None
    """Median share of a traced step in host stretches of 1 ms or more (report `breakdown_detail.long_host_share`)."""
    core_wait_share: float | None = None
    """Median share of a traced step its thread waited for a CPU core (`breakdown_detail.core_wait_share`)."""
    traced_step_s: dict[str, float] = field(default_factory=dict)
    """Seconds per traced step of each breakdown part and the window (`step_s`): medians over the
    traced steps' windows (report `breakdown_detail.steps`); empty without per-step windows."""
    programs_in_trace: int | None
    # memory / runtime
    peak_bytes: int | None
    peak_source: str | None
    capacity_bytes: int | None
    capacity_from: str | None
    fixed_bytes: int | None
    duty_cycle_pct: float | None
    at_peak: dict[str, Any] | None = None
    """The report's `memory.at_peak`: what is live at the step's peak, by category (XLA's liveness)."""
    out_of_memory: dict[str, Any] | None = None
    """The report's `memory.out_of_memory`: the run died out of device memory."""
    torch_state: dict[str, Any] | None = None
    """The report's `memory.torch_state`: PyTorch parameter, gradient and optimizer-state bytes."""
    # multi-process jobs
    processes: int | None = None
    hosts: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    inference: InferenceStats | None = None
    """Generation requests (the report's `inference` section); None for a run that served none."""
    kv_dtypes: tuple[str, ...] = ()
    """dtypes of the KV caches the requests' models returned (Hugging Face generate())."""
    cache_reads: CacheReads | None = None
    """Passes of a JAX decode step over its KV cache (analyzers/cache_reads.py); None elsewhere."""
    whole_sequence: WholeSequence | None = None
    """Decode steps that feed the whole sequence again (no KV cache), their time fitted by length
    (analyzers/whole_sequence.py); None elsewhere."""
    """The report's `stragglers`: worst first."""

    @property
    def fetches_per_step(self) -> float | None:
        if self.framework == "torch":  # the share of steps that wait: an eval's or a logging step's many transfers stall one step
            if self.torch_steps_with_sync is not None and self.torch_steps_with_sync[1]:
                return self.torch_steps_with_sync[0] / self.torch_steps_with_sync[1]
            return self.torch_syncs / self.torch_sync_steps if self.torch_syncs is not None and self.torch_sync_steps else None
        if not self.step_calls or self.fetched_step_calls is None:
            return None
        return self.fetched_step_calls / self.step_calls

    @property
    def programs_per_step(self) -> float | None:
        """Program launches in the trace per step it holds (`trace_steps`, else the traced steps: a
        trace held open while queued steps ran holds more steps than were traced)."""
        held = self.trace_steps or self.traced_steps
        if self.programs_in_trace is None or not held:
            return None
        return self.programs_in_trace / held

    @property
    def ridge_flops_per_byte(self) -> float | None:
        t = self.target
        peak = t.peak_tflops.get("bf16") if t else None
        return peak * 1e12 / (t.hbm_gbps * 1e9) if (t and peak and t.hbm_gbps) else None


SOURCES: dict[str, tuple[str, str]] = {
    "iteration_median_s": ("steps", "steps.iteration_median_s (median over steady steps of duration_s, the wall-clock iteration)"),
    "step_s": ("steps", "steps.steady_step_s (the median iteration, or where the loop runs ahead of the device its pace or mean iteration: the wall time per step)"),
    "device_median_s": ("steps", "steps.device_median_s (median over steady steps of device_s, dispatch to outputs ready)"),
    "host_median_s": ("steps", "steps.host_median_s (median over steady steps of duration_s - device_s)"),
    "loop_median_s": ("steps", "steps.loop_median_s (median over steady steps of loop_s: the iteration outside jitted calls and device waits)"),
    "call_median_s": ("steps", "steps.call_median_s (median over steady steps of call_s: time inside jitted calls)"),
    "loop_low_s": ("steps", "steps.loop_low_s (the least loop_s of the steady steps)"),
    "loop_steps": ("steps", "steps.call_loop_steps (steady steps with call_s and loop_s known)"),
    "after_warmup_wall_s": ("steps", "steps.parquet: sum(duration_s[warmup:]), a traced or instrumented step as the ordinary median plus its recompile seconds (the profiler slowed it)"),
    "late_compiles": ("compiles", "compile.after_warmup (recompiles: the step function, or a function compiled before; analyzers/compiles.py)"),
    "late_compile_s": ("compiles", "compile.after_warmup_s"),
    "first_compiles_after_warmup": ("compiles", "compile.other_after_warmup (compiles of functions other than the step, once at a boundary: first compiles of an eval step, eager ops at an epoch end; not recompiles)"),
    "recompile_excess_s": ("steps", "steps.parquet: sum over steps after warm-up holding a recompile of duration_s - median(duration_s of steps that did not compile, untraced); a traced or instrumented step counts its recompile seconds"),
    "pmap_compiles": ("compiles", "compiles.parquet: backend_compile events of pmap(...) or jit(_fun) (pmap in jax >= 0.7)"),
    "torch_syncs": ("steps", "run.json torch.syncs.count (device-to-host transfers in the steps)"),
    "torch_sync_callers": ("steps", "run.json torch.syncs.by_caller (transfers made by Lightning's own code)"),
    "torch_steps_with_sync": ("steps", "run.json torch.syncs.steps_with_sync of torch.syncs.steps (steps with at least one transfer)"),
    "compile_total_s": ("compiles", "compile.total_s"),
    "distinct_compiled": ("compiles", "compiles.parquet: distinct jit(...) function of backend_compile events"),
    "compile_cache_events": ("compiles", "compile.cache_hits + compile.cache_misses"),
    "graph_breaks": ("compiles", "compile.torch.graph_breaks"),
    "torch_graphs": ("compiles", "compile.torch.unique_graphs"),
    "fetches_per_step": ("steps", "run.json jax.fetched_step_calls / jax.step_calls (JAX collector); torch.syncs.count / steps.count (PyTorch)"),
    "fetched_step_calls": ("steps", "run.json jax.fetched_step_calls"),
    "step_calls": ("steps", "run.json jax.step_calls"),
    "jitted_functions": ("compiles", "run.json jax.jitted_functions"),
    "hlo_instructions": ("hlo", "hlo.top_level_instructions"),
    "max_dot_repeats": ("hlo", "step program HLO: matmuls of one kind (dtype, m, n, k, dimension numbers) one after another on a data path, weighted by FLOPs (signals.layer_repeats)"),
    "while_loops": ("hlo", "hlo.analysis.while_loops"),
    "step_compile_s": ("compiles", "compiles.parquet: longest backend_compile of the step function"),
    "argument_bytes": ("hlo", "programs[step].argument_bytes (XLA memory analysis)"),
    "output_bytes": ("hlo", "programs[step].output_bytes"),
    "alias_bytes": ("hlo", "programs[step].alias_bytes"),
    "f32_dot_share": ("hlo", "step program HLO: f32 share of dot FLOPs by operand dtype before backend converts (hlo.analysis.dot_flops_share_by_dtype.f32 counts after)"),
    "padding_waste": ("hlo", "step program HLO dots padded to the target's MXU tile"),
    "dot_intensity_bf16": ("hlo", "step program HLO: sum(dot FLOPs) / sum(dot operand+result bytes at 2 bytes per element)"),
    "ridge_flops_per_byte": ("chip", "target bf16 peak FLOP/s / HBM bytes/s (chip catalogue)"),
    "traced_matmul_s": ("trace", "breakdown_detail.steps: median matmul + collective seconds per traced step"),
    "traced_device_ops_s": ("trace", "breakdown_detail.steps: median seconds per traced step with a device op running (matmul, collective, data movement, compute)"),
    "programs_per_step": ("trace", "timeline.parquet: program events / ops.steps, else steps.traced (imported runs: device_steps.count)"),
    "peak_bytes": ("memory", "memory.peak_bytes"),
    "capacity_bytes": ("memory", "memory.capacity_bytes, else the target chip's HBM per device (catalogue)"),
    "fixed_bytes": ("memory", "memory.fixed_bytes"),
    "duty_cycle_pct": ("runtime", "runtime.duty_cycle_pct"),
}


def build_signals(run: Run, report: Report | None = None, *, target: str | None = None) -> Signals:
    """Compute every signal of `run` once, from its typed `report` (built here when not given)."""
    report = build_report(run) if report is None else report
    own = run_chip(run)
    tgt = lookup_chip(target) if target else None
    target_chip, target_from = (tgt, "--target") if tgt else ((own, "run") if own is not None and own.kind == "tpu" else (None, None))
    st, comp, mem, tc = report.steps, report.compile, report.memory, report.torch_compile
    jax_counts = run.manifest.get("jax") or {}
    syncs = (run.manifest.get("torch") or {}).get("syncs") or {}
    capacity, capacity_from = _capacity(mem, target_chip, tgt is not None)
    steps_after, wall_after, excess = _after_warmup(run, st.steady_step_s if st.runs_ahead else None)
    hlo_fields = _hlo_signals(run, report, target_chip)
    batch = (run.manifest.get("config") or {}).get("batch_size")
    memory_full = mem.peak_bytes is not None and bool(capacity) and 1 - mem.peak_bytes / capacity < T.SMALL_BATCH_MIN_HEADROOM
    traces, hosts = report.traces, report.hosts
    return Signals(
        framework=step_framework(run), platform=(run.manifest.get("hardware") or {}).get("platform"),
        run_chip=own, target=target_chip, target_from=target_from,
        steps=st.count, traced_steps=st.traced or (traces.device_step_count if traces is not None else 0), trace_steps=traces.op_steps if traces is not None else None,
        trace_fix=trace_fix(run, st.count),
        iteration_median_s=st.iteration_median_s, device_median_s=st.device_median_s, host_median_s=st.host_median_s,
        step_s=st.steady_step_s, loop_median_s=st.loop_median_s, call_median_s=st.call_median_s, loop_low_s=st.loop_low_s, loop_steps=st.call_loop_steps,
        after_warmup_wall_s=wall_after, steps_after_warmup=steps_after,
        compiles=comp.count if comp is not None else None, compile_total_s=comp.total_s if comp is not None else None,
        late_compiles=comp.after_warmup if comp is not None else None, late_compile_s=comp.after_warmup_s if comp is not None else None,
        late_functions=dict(comp.after_warmup_functions) if comp is not None else {}, recompile_causes=list(comp.after_warmup_causes) if comp is not None else [], first_compiles_after_warmup=dict(comp.other_after_warmup) if comp is not None else {},
        recompile_excess_s=excess, step_api=_step_api(run, st.source), pmap_compiles=_pmap_compiles(run),
        distinct_compiled=_distinct_compiled(run), compile_cache_events=_cache_events(comp),
        compile_cache_env=jax_counts.get("compilation_cache_dir") or (run.manifest.get("env") or {}).get("JAX_COMPILATION_CACHE_DIR"),
        step_program=report.hlo is not None and report.hlo.step is not None, jitted_functions=jax_counts.get("jitted_functions"),
        torch_graphs=tc.unique_graphs if tc is not None else None, graph_breaks=tc.graph_breaks if tc is not None else None,
        graph_break_reasons=list(tc.graph_break_reasons) if tc is not None else [], torch_recompile_reasons=list(tc.recompile_reasons) if tc is not None else [],
        step_calls=jax_counts.get("step_calls"), fetched_step_calls=jax_counts.get("fetched_step_calls"),
        torch_syncs=syncs.get("count"), torch_sync_steps=st.count if syncs else None,
        torch_steps_with_sync=(int(syncs["steps_with_sync"]), int(syncs["steps"])) if "steps_with_sync" in syncs and syncs.get("steps") else None,
        torch_sync_callers={str(k): int(v) for k, v in (syncs.get("by_caller") or {}).items()}, batch_size=int(batch) if batch else None,
        **hlo_fields, fixed_dims=_fixed_dims(run, report, batch, memory_full),
        breakdown=_usable_breakdown(traces), traced_step_s=_traced_step_s(traces),
        long_host_share=traces.breakdown_long_host_share if traces is not None and _usable_breakdown(traces) else None,
        core_wait_share=traces.breakdown_core_wait_share if traces is not None and _usable_breakdown(traces) else None, programs_in_trace=_programs_in_trace(run),
        peak_bytes=mem.peak_bytes, peak_source=mem.peak_source, capacity_bytes=capacity, capacity_from=capacity_from,
        fixed_bytes=mem.fixed_bytes, duty_cycle_pct=report.runtime.duty_cycle_pct if report.runtime is not None else None,
        at_peak=to_jsonable(mem.at_peak) if mem.at_peak is not None else None,
        out_of_memory=to_jsonable(mem.out_of_memory) if mem.out_of_memory is not None else None,
        torch_state=to_jsonable(mem.torch_state) if mem.torch_state is not None else None,
        processes=hosts.processes if hosts is not None else None,
        hosts=to_jsonable(list(hosts.hosts)) if hosts is not None else [], stragglers=to_jsonable(list(hosts.stragglers)) if hosts is not None else [],
        inference=report.inference, kv_dtypes=_kv_dtypes(run) if report.inference is not None else (),
        cache_reads=cache_reads(run) if report.inference is not None else None,
        whole_sequence=whole_sequence_decode(run) if report.inference is not None else None,
    )


def trace_fix(run: Run, steps: int) -> str:
    """What would give `run` a trace window, from what it did: "record without --no-trace" only when
    it was recorded with `--no-trace`; a run that failed or ended before its window opened is told
    so (a failed run traced by default was told to drop a flag it never had)."""
    config = run.manifest.get("config") or {}
    if "trace_steps" not in config:  # an import, or a run recorded through the Python API without options
        return "record it with `tpu-perf record` (a trace window is on by default)"
    window = config["trace_steps"]
    if window is None:
        return "record without --no-trace"
    start, stop = (int(v) for v in window)
    ended = {"failed": "failed", "crashed": "crashed", "interrupted": "was interrupted"}.get(run.status, "ended")
    if steps <= start:
        return f"the run {ended} after {steps} step(s), before its trace window (--trace-steps {start}:{stop}) opened: pass a window inside the run"
    return f"its trace window (--trace-steps {start}:{stop}) captured no step's device work"


def _kv_dtypes(run: Run) -> tuple[str, ...]:
    requests = run.table("requests")
    return tuple(sorted(set(requests["kv_dtype"].dropna().astype(str)))) if "kv_dtype" in requests else ()


BREAKDOWN_MIN_DEVICE_SHARE = 0.01
"""Step windows with less device work than this (ops and idle-in-program) did not frame the device's
work: host-side step annotations in a loop that never waits end at dispatch, and the programs run
after them. Such a breakdown says nothing about input or host time, so the rules do not read it."""


def _usable_breakdown(traces: TraceSection | None) -> dict[str, float]:
    if traces is None:
        return {}
    parts = dict(traces.breakdown)
    device = sum(parts.get(p, 0.0) for p in (*OP_PARTS, "device_idle"))
    return {} if (parts and traces.breakdown_window == "steps" and device < BREAKDOWN_MIN_DEVICE_SHARE) else parts


def _traced_step_s(traces: TraceSection | None) -> dict[str, float]:
    if traces is None or not _usable_breakdown(traces) or traces.breakdown_window != "steps" or not traces.breakdown_steps:
        return {}
    keys = [k for k, v in traces.breakdown_steps[0].items() if isinstance(v, (int, float)) and k != "step"]
    known = {k: [float(row[k]) for row in traces.breakdown_steps if row.get(k) is not None and not np.isnan(row[k])] for k in keys}
    return {k: float(np.median(v)) for k, v in known.items() if v}


def _cache_events(comp: CompileStats | None) -> int | None:
    """Persistent-cache hits plus misses; None where neither was seen (unknown, not none)."""
    known = [n for n in (comp.cache_hits, comp.cache_misses) if n is not None] if comp is not None else []
    return sum(known) if known else None


def _after_warmup(run: Run, pace_s: float | None = None) -> tuple[int | None, float | None, float | None]:
    """(steps after warm-up, their summed iterations, the recompiling steps' excess over an ordinary
    one), in the window `compile.after_warmup` counts in (analyzers/compiles.py). `pace_s`: the
    device's pace where the loop runs ahead, the least an ordinary step costs (its iteration is a
    dispatch: 0.31 ms against a 1.0 ms pace once predicted 491x for a 31x fix)."""
    steps, late = run_steps(run), after_warmup_compiles(run)
    if late is None or len(steps) < 2:
        return None, None, None
    warmup = run_warmup(run)
    after = steps.iloc[warmup:]
    durations = after["duration_s"].to_numpy(float)
    profiled = np.zeros(len(after), dtype=bool)
    for flag in ("traced", "instrumented"):
        if flag in after:
            profiled |= after[flag].fillna(False).astype(bool).to_numpy()
    rec = late[late["recompile"]]
    times, secs = rec["time_s"].to_numpy(float), rec["duration_s"].to_numpy(float)
    starts, ends = after["start_time_s"].to_numpy(float), after["end_time_s"].to_numpy(float)
    stamped = ~np.isnan(times)  # a step holds the recompiles stamped in (start, end]
    order = np.argsort(times[stamped], kind="stable")
    times, secs = times[stamped][order], np.nan_to_num(secs[stamped][order])
    first, past = np.searchsorted(times, starts, side="right"), np.searchsorted(times, ends, side="right")
    holds = (past > first) & ~np.isnan(starts) & ~np.isnan(ends)
    held_s = np.concatenate(([0.0], np.cumsum(secs)))
    compiled = after["compiled"].astype(bool).to_numpy()
    ordinary = ~compiled & ~profiled if (~compiled & ~profiled).any() else ~compiled
    base = float(np.median(durations[ordinary])) if ordinary.any() else None
    if base is not None and pace_s is not None:
        base = max(base, pace_s)
    if base is not None:  # a step the profiler slowed (its Python tracer, the trace's stop) counts as an ordinary step plus the recompiles it held
        durations = np.where(profiled, base + np.where(holds, held_s[past] - held_s[first], 0.0), durations)
    wall = float(durations.sum())
    if not len(times):
        return len(after), wall, 0.0
    if base is None:
        return len(after), wall, None  # no step without a compile to compare with
    return len(after), wall, float(np.clip(durations[holds] - base, 0.0, None).sum())


def _step_api(run: Run, source: str | None) -> str | None:
    if str(source or "").startswith("auto:pmap("):
        return "pmap"
    programs = run.programs
    if programs.empty or "wrapper" not in programs or "is_step" not in programs:
        return None
    wrappers = programs.loc[programs["is_step"].fillna(False).astype(bool), "wrapper"].dropna()
    return str(wrappers.iloc[0]) if len(wrappers) else None


def _pmap_compiles(run: Run) -> int:
    c = run.compiles
    if c.empty:
        return 0
    names = c.loc[c["event"] == "backend_compile", "function"].astype(str)
    return int((names.str.startswith("pmap(") | names.isin(PMAP_PROGRAM_NAMES)).sum())


PMAP_PROGRAM_NAMES = ("jit(_fun)",)
"""What jax >= 0.7 names a pmap's program: pmap runs as jit of shard_map over `_fun` (jax/_src/pmap.py)."""


def _distinct_compiled(run: Run) -> int:
    """Distinct programs compiled with `jit(...)` names (pmap programs left out)."""
    c = run.compiles
    if c.empty:
        return 0
    names = c.loc[c["event"] == "backend_compile", "function"].astype(str)
    return int(names[names.str.startswith("jit(") & ~names.isin(PMAP_PROGRAM_NAMES)].nunique())


def _programs_in_trace(run: Run) -> int | None:
    tl = run.table("timeline")
    count = int((tl["kind"] == "program").sum()) if not tl.empty else 0
    return count or None  # traces without program events (Kineto) say nothing about launches


def _step_program(run: Run, report: Report) -> tuple[dict[str, Any] | None, HloModule | None]:
    """The step program's row (`programs.step_program`, the one selector) and its HLO module."""
    chosen = step_program(run.programs)
    step = None if chosen is None else {k: (None if _missing(v) else v) for k, v in chosen.items()}
    if step is None or not isinstance(step.get("hlo_file"), str) or not run.exists(step["hlo_file"]):
        return step, None
    return step, run_hlo(run, step["hlo_file"])


def _missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _fixed_dims(run: Run, report: Report, batch: int | None, memory_full: bool) -> dict[str, frozenset[str]]:
    _, module = _step_program(run, report)
    return fixed_dot_dims(module, batch if memory_full else None) if module is not None else {}


def _hlo_signals(run: Run, report: Report, target: Chip | None) -> dict[str, Any]:
    step, module = _step_program(run, report)
    row = step or {}
    summary = report.hlo.step if report.hlo is not None else None
    out: dict[str, Any] = {
        "argument_bytes": row.get("argument_bytes"), "output_bytes": row.get("output_bytes"), "alias_bytes": row.get("alias_bytes"),
        "step_compile_s": _step_compile_s(run, row.get("function")),
        "hlo": None, "hlo_target": None, "hlo_instructions": summary.summary.top_level_instructions if summary is not None else None,
        "max_dot_repeats": None, "dot_intensity_bf16": None, "dot_source_dtype_share": {},
    }
    if module is None:  # PyTorch: the counted step's FLOPs by the dtype each op ran in (collectors/torch/flop_dtypes.py)
        out["dot_source_dtype_share"] = counted_dtype_share(row)
        return out
    own = analyze_hlo(module)
    out["hlo"] = own
    out["dot_source_dtype_share"] = dot_flops_share_by_source_dtype(module, own)
    out["hlo_target"] = analyze_hlo(module, tile=tile_for_chip(target.name)) if target else None
    if own.dots:
        out["max_dot_repeats"] = layer_repeats(own)
        flops = sum(d.flops for d in own.dots)
        moved = sum(dot_bytes_bf16(d) for d in own.dots)
        out["dot_intensity_bf16"] = flops / moved if moved else None
    return out


def counted_dtype_share(row: dict[str, Any]) -> dict[str, float]:
    """Shares of a PyTorch step's counted FLOPs by dtype, from its `programs` row; {} when not counted."""
    raw = row.get("dot_flops_by_dtype")
    if not isinstance(raw, str):
        return {}
    flops = {str(k): float(v) for k, v in json.loads(raw).items()}
    total = sum(flops.values())
    return {k: v / total for k, v in flops.items()} if total else {}


def dot_bytes_bf16(d: DotInfo) -> float:
    """Bytes a dot reads and writes (operands and result) at 2 bytes per element."""
    if not (d.m and d.n and d.k):
        return 0.0
    return 2.0 * (d.flops / (2 * d.m * d.n * d.k)) * (d.m * d.k + d.k * d.n + d.m * d.n)


def layer_repeats(a: HloAnalysis) -> int:
    """How many times the program repeats one layer: among matmuls (dtype, m, n, k, dimension
    numbers) that follow one another on a data path (DotInfo.chain > 1), the chain length carrying
    the most FLOPs. Each unrolled layer feeds the next, so in an L-layer stack most matmuls chain L
    deep; matmuls side by side (a recurrent cell's gates, attention's q/k/v) count once, however
    many share a shape. The dimension numbers tell a layer's forward, weight-gradient and
    input-gradient dots apart: in a square two-layer MLP they share one shape (5 dots)."""
    flops_by_chain: Counter[int] = Counter()
    for d in a.dots:
        if d.chain > 1:
            flops_by_chain[d.chain] += d.flops
    return flops_by_chain.most_common(1)[0][0] if flops_by_chain else 1


def _step_compile_s(run: Run, function: str | None) -> float | None:
    c = run.compiles
    if not function or c.empty:
        return None
    rows = c[(c["event"] == "backend_compile") & (c["function"] == f"jit({function})")]
    return float(rows["duration_s"].max()) if not rows.empty else None


def _capacity(mem: MemoryStats, target: Chip | None, explicit: bool) -> tuple[int | None, str | None]:
    """Per-device HBM to judge against: the target's when `--target` names one, else the run's."""
    if explicit and target is not None and target.hbm_bytes_per_device:
        return target.hbm_bytes_per_device, f"catalogue:{target.name}"
    if mem.capacity_bytes:
        return int(mem.capacity_bytes), "memory.capacity_bytes"
    if target is not None and target.hbm_bytes_per_device:
        return target.hbm_bytes_per_device, f"catalogue:{target.name}"
    return None, None


def src(name: str, value: Any) -> Evidence:
    """Evidence for the signal `name`, with the source and path `SOURCES` gives it."""
    source, path = SOURCES[name]
    return ev(name, value, source, path)
