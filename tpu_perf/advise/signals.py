"""The numbers the rules read, computed once per run: `Signals`, built by `build_signals`.

Rules never read tables or the report themselves: this module is the one adapter between the
analyzers' output and the advisor, so a change in the report's shape changes one function here.
Each field is None when its data is missing; `SOURCES` says where each comes from, and rules copy
that into their evidence.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_perf.advise.dot_dtypes import dot_flops_share_by_source_dtype
from tpu_perf.advise.finding import Evidence, ev
from tpu_perf.analyzers.flops import run_chip
from tpu_perf.analyzers.hlo import HloModule, run_hlo
from tpu_perf.analyzers.hlo_analysis import HloAnalysis, analyze_hlo, tile_for_chip
from tpu_perf.analyzers.report import build_report
from tpu_perf.analyzers.steps import run_steps
from tpu_perf.hardware import Chip, lookup_chip
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
    iteration_median_s: float | None
    device_median_s: float | None
    host_median_s: float | None
    after_first_wall_s: float | None
    """The iterations after the first step, summed (start of step 1 to the end of the last)."""
    # compiles
    compiles: int
    compile_total_s: float
    late_compiles: int | None
    """Backend compiles after the first step ended (shapes or dtypes that changed; new functions)."""
    late_compile_s: float | None
    """All compile work (trace, lower, backend compile) after the first step ended."""
    recompile_excess_s: float | None
    """What the steps that compiled after the first took beyond a step that did not: the whole cost
    of a changed shape (compiling, and the slow paths around it), not only the compile events."""
    late_functions: dict[str, int]
    distinct_compiled: int
    compile_cache_events: int
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
    # host syncs (JAX collector counters)
    step_calls: int | None
    fetched_step_calls: int | None
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
    """The report's `stragglers`: worst first."""

    @property
    def fetches_per_step(self) -> float | None:
        if not self.step_calls or self.fetched_step_calls is None:
            return None
        return self.fetched_step_calls / self.step_calls

    @property
    def programs_per_step(self) -> float | None:
        if self.programs_in_trace is None or not self.traced_steps:
            return None
        return self.programs_in_trace / self.traced_steps

    @property
    def ridge_flops_per_byte(self) -> float | None:
        t = self.target
        peak = t.peak_tflops.get("bf16") if t else None
        return peak * 1e12 / (t.hbm_gbps * 1e9) if (t and peak and t.hbm_gbps) else None


SOURCES: dict[str, tuple[str, str]] = {
    "iteration_median_s": ("steps", "steps.median_s (median over steady steps of duration_s, the wall-clock iteration)"),
    "device_median_s": ("steps", "steps.device_median_s (median over steady steps of device_s, dispatch to outputs ready)"),
    "host_median_s": ("steps", "steps.host_median_s (median over steady steps of duration_s - device_s)"),
    "after_first_wall_s": ("steps", "steps.parquet: start_time_s[last] - start_time_s[1] + duration_s[last] (the iterations after the first)"),
    "late_compiles": ("compiles", "compiles.parquet: backend_compile events with end_time_s[0] < time_s <= end_time_s[last]"),
    "late_compile_s": ("compiles", "compiles.parquet: sum(duration_s) of trace/lower/backend_compile events with end_time_s[0] < time_s <= end_time_s[last]"),
    "recompile_excess_s": ("steps", "steps.parquet: sum over steps i >= 1 that compiled of iteration[i] - median(iteration of steps i >= 1 that did not); iteration[i] = start_time_s[i+1] - start_time_s[i]"),
    "compile_total_s": ("compiles", "compile.total_s"),
    "distinct_compiled": ("compiles", "compiles.parquet: distinct jit(...) function of backend_compile events"),
    "compile_cache_events": ("compiles", "compile.cache_hits + compile.cache_misses"),
    "graph_breaks": ("compiles", "compile.torch.graph_breaks"),
    "torch_graphs": ("compiles", "compile.torch.unique_graphs"),
    "fetches_per_step": ("steps", "run.json jax.fetched_step_calls / jax.step_calls (JAX collector)"),
    "fetched_step_calls": ("steps", "run.json jax.fetched_step_calls"),
    "step_calls": ("steps", "run.json jax.step_calls"),
    "jitted_functions": ("compiles", "run.json jax.jitted_functions"),
    "hlo_instructions": ("hlo", "hlo.top_level_instructions"),
    "max_dot_repeats": ("hlo", "step program HLO: occurrences of a repeated matmul shape (dtype, m, n, k), weighted by FLOPs (signals.layer_repeats)"),
    "while_loops": ("hlo", "hlo.analysis.while_loops"),
    "step_compile_s": ("compiles", "compiles.parquet: longest backend_compile of the step function"),
    "argument_bytes": ("hlo", "programs[step].argument_bytes (XLA memory analysis)"),
    "output_bytes": ("hlo", "programs[step].output_bytes"),
    "alias_bytes": ("hlo", "programs[step].alias_bytes"),
    "f32_dot_share": ("hlo", "step program HLO: f32 share of dot FLOPs by operand dtype before backend converts (hlo.analysis.dot_flops_share_by_dtype.f32 counts after)"),
    "padding_waste": ("hlo", "step program HLO dots padded to the target's MXU tile"),
    "dot_intensity_bf16": ("hlo", "step program HLO: sum(dot FLOPs) / sum(dot operand+result bytes at 2 bytes per element)"),
    "ridge_flops_per_byte": ("chip", "target bf16 peak FLOP/s / HBM bytes/s (chip catalogue)"),
    "programs_per_step": ("trace", "timeline.parquet: program events / steps.traced (imported runs: device_steps.count)"),
    "peak_bytes": ("memory", "memory.peak_bytes"),
    "capacity_bytes": ("memory", "memory.capacity_bytes, else the target chip's HBM per device (catalogue)"),
    "fixed_bytes": ("memory", "memory.fixed_bytes"),
    "duty_cycle_pct": ("runtime", "runtime.duty_cycle_pct"),
}


def report_dict(run: Run) -> dict[str, Any]:
    """The report as a dict: the one place the advisor reads it."""
    return build_report(run).to_dict()


def build_signals(run: Run, doc: dict[str, Any] | None = None, *, target: str | None = None) -> Signals:
    """Compute every signal of `run` once. `doc` is its report dict (built here when not given)."""
    doc = report_dict(run) if doc is None else doc
    own = run_chip(run)
    tgt = lookup_chip(target) if target else None
    target_chip, target_from = (tgt, "--target") if tgt else ((own, "run") if own is not None and own.kind == "tpu" else (None, None))
    steps_doc, comp, mem = doc.get("steps") or {}, doc.get("compile") or {}, doc.get("memory") or {}
    torch_doc = comp.get("torch") or {}
    it, dev, host = steps_doc.get("median_s"), steps_doc.get("device_median_s"), steps_doc.get("host_median_s")
    late = _late_compiles(run)
    hlo_fields = _hlo_signals(run, doc, target_chip)
    jax_counts = run.manifest.get("jax") or {}
    capacity, capacity_from = _capacity(mem, target_chip, tgt is not None)
    return Signals(
        framework=_framework(run), platform=(run.manifest.get("hardware") or {}).get("platform"),
        run_chip=own, target=target_chip, target_from=target_from,
        steps=int(steps_doc.get("count") or 0), traced_steps=int(steps_doc.get("traced") or (doc.get("device_steps") or {}).get("count") or 0),
        iteration_median_s=it, device_median_s=dev, host_median_s=host, after_first_wall_s=late[0],
        compiles=int(comp.get("count") or 0), compile_total_s=float(comp.get("total_s") or 0.0),
        late_compiles=late[1], late_compile_s=late[2], late_functions=late[3], recompile_excess_s=_recompile_excess(run),
        distinct_compiled=_distinct_compiled(run), compile_cache_events=int(comp.get("cache_hits") or 0) + int(comp.get("cache_misses") or 0),
        compile_cache_env=jax_counts.get("compilation_cache_dir") or (run.manifest.get("env") or {}).get("JAX_COMPILATION_CACHE_DIR"),
        step_program=any(p.get("is_step") for p in doc.get("programs") or []), jitted_functions=jax_counts.get("jitted_functions"),
        torch_graphs=torch_doc.get("unique_graphs"), graph_breaks=torch_doc.get("graph_breaks") if torch_doc else None,
        graph_break_reasons=list(torch_doc.get("graph_break_reasons") or []), torch_recompile_reasons=list(torch_doc.get("recompile_reasons") or []),
        step_calls=jax_counts.get("step_calls"), fetched_step_calls=jax_counts.get("fetched_step_calls"),
        **hlo_fields,
        breakdown=_usable_breakdown(doc), programs_in_trace=_programs_in_trace(run),
        peak_bytes=mem.get("peak_bytes"), peak_source=mem.get("peak_source"), capacity_bytes=capacity, capacity_from=capacity_from,
        fixed_bytes=mem.get("fixed_bytes"), duty_cycle_pct=(doc.get("runtime") or {}).get("duty_cycle_pct"),
        at_peak=mem.get("at_peak"), out_of_memory=mem.get("out_of_memory"), torch_state=mem.get("torch_state"),
        processes=(doc.get("job") or {}).get("processes"), hosts=list(doc.get("hosts") or []), stragglers=list(doc.get("stragglers") or []),
    )


BREAKDOWN_MIN_DEVICE_SHARE = 0.01
"""Step windows with less device work than this (ops and idle-in-program) did not frame the device's
work: host-side step annotations in a loop that never waits end at dispatch, and the programs run
after them. Such a breakdown says nothing about input or host time, so the rules do not read it."""


def _usable_breakdown(doc: dict[str, Any]) -> dict[str, float]:
    parts = dict(doc.get("breakdown") or {})
    window = (doc.get("breakdown_detail") or {}).get("window")
    device = sum(parts.get(p, 0.0) for p in (*OP_PARTS, "device_idle"))
    return {} if (parts and window == "steps" and device < BREAKDOWN_MIN_DEVICE_SHARE) else parts


def _framework(run: Run) -> str | None:
    frameworks = run.manifest.get("frameworks") or []
    return "torch" if {"torch", "pytorch"} & set(frameworks) else ("jax" if "jax" in frameworks else (frameworks[0] if frameworks else None))


def _late_compiles(run: Run) -> tuple[float | None, int | None, float | None, dict[str, int]]:
    """(iterations after the first step, backend compiles in them, seconds of compile work, compiles by function).

    After the first step rather than after warm-up: warm-up is the leading steps that compiled, so a
    shape that changes every step from the start would hide in it."""
    steps, compiles = run_steps(run), run.compiles
    if len(steps) < 2:
        return None, None, None, {}
    start, end = float(steps["end_time_s"].iloc[0]), float(steps["end_time_s"].iloc[-1])
    wall = float(steps["duration_s"].to_numpy(float)[1:].sum())  # steps tile the loop: iterations
    if compiles.empty:
        return wall, 0, 0.0, {}
    inside = compiles[(compiles["time_s"] > start) & (compiles["time_s"] <= end)]
    backend = inside[inside["event"] == "backend_compile"]
    work = inside[inside["event"].isin(["trace", "lower", "backend_compile"])]
    functions = {str(k): int(v) for k, v in backend["function"].value_counts().items()}
    return wall, len(backend), float(work["duration_s"].sum()), functions


def _recompile_excess(run: Run) -> float | None:
    steps = run_steps(run)
    if len(steps) < 2:
        return None
    later = steps["duration_s"].to_numpy(float)[1:]
    compiled = steps["compiled"].astype(bool).to_numpy()[1:]
    if not compiled.any():
        return 0.0
    if compiled.all():
        return None  # no step without a compile to compare with
    return float(np.clip(later[compiled] - np.median(later[~compiled]), 0.0, None).sum())


def _distinct_compiled(run: Run) -> int:
    """Distinct programs compiled with `jit(...)` names (pmap programs left out)."""
    c = run.compiles
    if c.empty:
        return 0
    names = c.loc[c["event"] == "backend_compile", "function"].astype(str)
    return int(names[names.str.startswith("jit(")].nunique())


def _programs_in_trace(run: Run) -> int | None:
    tl = run.table("timeline")
    count = int((tl["kind"] == "program").sum()) if not tl.empty else 0
    return count or None  # traces without program events (Kineto) say nothing about launches


def _step_module(run: Run, doc: dict[str, Any]) -> tuple[dict[str, Any] | None, HloModule | None]:
    programs = doc.get("programs") or []
    step = next((p for p in programs if p.get("is_step")), None)
    if step is None or not isinstance(step.get("hlo_file"), str) or not run.exists(step["hlo_file"]):
        return step, None
    return step, run_hlo(run, step["hlo_file"])


def _hlo_signals(run: Run, doc: dict[str, Any], target: Chip | None) -> dict[str, Any]:
    step, module = _step_module(run, doc)
    row = step or {}
    out: dict[str, Any] = {
        "argument_bytes": row.get("argument_bytes"), "output_bytes": row.get("output_bytes"), "alias_bytes": row.get("alias_bytes"),
        "step_compile_s": _step_compile_s(run, row.get("function")),
        "hlo": None, "hlo_target": None, "hlo_instructions": (doc.get("hlo") or {}).get("top_level_instructions"), "max_dot_repeats": None, "dot_intensity_bf16": None, "dot_source_dtype_share": {},
    }
    if module is None:
        return out
    own = analyze_hlo(module)
    out["hlo"] = own
    out["dot_source_dtype_share"] = dot_flops_share_by_source_dtype(module, own)
    out["hlo_target"] = analyze_hlo(module, tile=tile_for_chip(target.name)) if target else None
    if own.dots:
        out["max_dot_repeats"] = layer_repeats(own)
        flops = sum(d.flops for d in own.dots)
        moved = sum(2.0 * (d.flops / (2 * d.m * d.n * d.k)) * (d.m * d.k + d.k * d.n + d.m * d.n) for d in own.dots if d.m and d.n and d.k)
        out["dot_intensity_bf16"] = flops / moved if moved else None
    return out


def layer_repeats(a: HloAnalysis) -> int:
    """How many times the program repeats one layer: among matmul shapes (dtype, m, n, k) that occur
    more than once, the occurrence count carrying the most FLOPs. Each unrolled layer repeats its
    own matmuls once, so in an L-layer stack most repeated shapes occur L times."""
    counts = Counter((d.dtype, d.m, d.n, d.k) for d in a.dots)
    flops_by_count: Counter[int] = Counter()
    for d in a.dots:
        n = counts[(d.dtype, d.m, d.n, d.k)]
        if n > 1:
            flops_by_count[n] += d.flops
    return flops_by_count.most_common(1)[0][0] if flops_by_count else 1


def _step_compile_s(run: Run, function: str | None) -> float | None:
    c = run.compiles
    if not function or c.empty:
        return None
    rows = c[(c["event"] == "backend_compile") & (c["function"] == f"jit({function})")]
    return float(rows["duration_s"].max()) if not rows.empty else None


def _capacity(mem: dict[str, Any], target: Chip | None, explicit: bool) -> tuple[int | None, str | None]:
    """Per-device HBM to judge against: the target's when `--target` names one, else the run's."""
    if explicit and target is not None and target.hbm_bytes_per_device:
        return target.hbm_bytes_per_device, f"catalogue:{target.name}"
    if mem.get("capacity_bytes"):
        return int(mem["capacity_bytes"]), "memory.capacity_bytes"
    if target is not None and target.hbm_bytes_per_device:
        return target.hbm_bytes_per_device, f"catalogue:{target.name}"
    return None, None


def src(name: str, value: Any) -> Evidence:
    """Evidence for the signal `name`, with the source and path `SOURCES` gives it."""
    source, path = SOURCES[name]
    return ev(name, value, source, path)
