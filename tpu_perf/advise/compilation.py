"""Compilation rules: recompiles after warm-up, op-by-op execution, unrolled layers, graph breaks,
and the persistent compilation cache."""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.finding import (
    Evidence,
    Finding,
    Fix,
    Gain,
    Rule,
    ev,
    fired,
    not_evaluable,
    passed,
)
from tpu_perf.advise.signals import OP_PARTS, Signals, src
from tpu_perf.analyzers.torch_compile import guard_words

JAX_JIT_DOCS = "https://docs.jax.dev/en/latest/jit-compilation.html"

RECOMPILATION = Rule(
    id="recompilation", title="The step recompiles while training", family="compilation", severity="high",
    fix=Fix(
        summary="Keep shapes and dtypes fixed from step to step (pad or bucket batches, mark true constants static); find the changing argument first.",
        jax='jax.config.update("jax_explain_cache_misses", True)  # logs which argument changed\nbatch = np.pad(batch, ((0, 0), (0, MAX_LEN - batch.shape[1])))  # one shape for every step',
        pytorch='torch._logging.set_logs(recompiles=True)  # or TORCH_LOGS=recompiles\nmodel = torch.compile(model, dynamic=True)  # or pad inputs to fixed shapes; torch._dynamo.mark_dynamic(x, 1)',
    ),
    docs=(JAX_JIT_DOCS, "https://docs.jax.dev/en/latest/config_options.html", "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html"),
)

CAUSES = {
    "shape": "a new shape", "dtype": "a new dtype", "sharding": "a new sharding", "static": "a static argument's new value",
    "structure": "a new pytree structure", "value": "a new non-array argument", "unknown": "no argument change seen",
    "guard": "a failed guard (torch.compile)",
}
"""What each kind of recompile cause (collectors/jax/recompiles.py) is, in the reason's words."""

STATIC_FIX = Fix(
    summary="A static argument takes a new value at each call, and every value compiles its own program: pass it traced (as an array), "
            "and keep static only arguments with a few values (flags, sizes).",
    jax="state, loss = train_step(state, batch, jnp.asarray(step))  # traced: one program for every step\n"
        "# and take it out of static_argnums / static_argnames (the schedule reads it as an array)",
)
"""The fix when the recompiles are a static argument's values (a step counter, a learning rate)."""

OP_BY_OP = Rule(
    id="op-by-op", title="The step runs op by op instead of as one compiled program", family="compilation", severity="high",
    fix=Fix(
        summary="Compile the whole training step (forward, backward and optimizer update) as one program.",
        jax="train_step = jax.jit(train_step, donate_argnums=0)",
        pytorch="model = torch.compile(model)  # on torch-tpu: compile the step; eager mode dispatches every op",
    ),
    docs=(JAX_JIT_DOCS, "https://docs.pytorch.org/docs/stable/generated/torch.compile.html"),
)

UNROLLED_LOOP = Rule(
    id="unrolled-loop", title="The same layer is repeated in the program instead of looped", family="compilation", severity="medium",
    fix=Fix(
        summary="Stack the layers' parameters and loop over them with a scan, so the program holds one layer body.",
        jax="x, _ = jax.lax.scan(lambda h, layer: (block(h, layer), None), x, stacked_layers)  # Flax: nn.scan",
        pytorch="# torch.compile traces each nn.Module call once per layer; compile the repeated block:\nfor block in model.layers: block.compile()",
    ),
    docs=("https://docs.jax.dev/en/latest/_autosummary/jax.lax.scan.html", "https://flax.readthedocs.io/en/latest/api_reference/flax.linen/transformations.html#flax.linen.scan", "https://docs.pytorch.org/tutorials/recipes/regional_compilation.html"),
)

GRAPH_BREAK = Rule(
    id="graph-break", title="torch.compile breaks the step into several graphs", family="compilation", severity="high",
    fix=Fix(
        summary="Remove what Dynamo cannot trace from the compiled region (`.item()`, printing, data-dependent Python control flow, unsupported calls).",
        pytorch='explanation = torch._dynamo.explain(model)(batch)\nprint(explanation.break_reasons)  # then: torch.compile(model, fullgraph=True) to keep it fixed',
    ),
    docs=("https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html", "https://docs.pytorch.org/docs/stable/torch.compiler_faq.html#graph-breaks"),
)

NO_COMPILE_CACHE = Rule(
    id="no-compile-cache", title="Long start-up compiles and no persistent compilation cache", family="compilation", severity="low",
    fix=Fix(
        summary="Turn on the persistent compilation cache so restarts load compiled programs instead of compiling again.",
        jax='jax.config.update("jax_compilation_cache_dir", "/tmp/jax_cache")\njax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)',
        pytorch='torch_tpu: set a compilation cache directory before the first step (see torch-tpu docs); inductor: TORCHINDUCTOR_FX_GRAPH_CACHE=1',
    ),
    docs=("https://docs.jax.dev/en/latest/persistent_compilation_cache.html",),
)


def recompilation(s: Signals) -> Finding:
    if s.inference is not None:
        return not_evaluable(RECOMPILATION, "a generation run: decode-recompiles judges its recompiles over the requests' time")
    if s.compiles is None:
        return not_evaluable(RECOMPILATION, "this run's compiles were not heard (an imported trace, or torch-tpu's own compiles): record it with tpu-perf")
    if s.late_compiles is None or s.after_warmup_wall_s is None or not s.steps_after_warmup:
        return not_evaluable(RECOMPILATION, "fewer than two steps recorded, so no steps after warm-up to count recompiles in: mark steps with tpu_perf.step() or jax.profiler.StepTraceAnnotation")
    later = s.steps_after_warmup
    per_step = s.late_compiles / later
    cost = s.recompile_excess_s if s.recompile_excess_s is not None else s.late_compile_s
    share = (cost or 0.0) / s.after_warmup_wall_s if s.after_warmup_wall_s > 0 else None
    evidence = [src("late_compiles", s.late_compiles), ev("steps_after_warmup_count", later, "steps", "steps.parquet: rows after warm-up (analyzers/steps.run_warmup)"),
                src("late_compile_s", s.late_compile_s), src("recompile_excess_s", s.recompile_excess_s), src("after_warmup_wall_s", s.after_warmup_wall_s)]
    evidence += [ev(f"compiles_of_{name}_count", n, "compiles", f"compile.after_warmup_functions[{name}]") for name, n in list(s.late_functions.items())[:3]]
    first = ", ".join(f"{name}" for name in list(s.first_compiles_after_warmup)[:4])
    also = f"; compiles of functions other than the step, once at an epoch, eval or logging boundary (not recompiles): {first}" if first else ""
    if s.late_compiles < T.RECOMPILE_MIN_COUNT or (per_step <= T.RECOMPILES_PER_STEP and (share is None or share < T.RECOMPILE_TIME_SHARE)):
        return passed(RECOMPILATION, f"{s.late_compiles} recompile(s) in the {later} steps after warm-up{also}", evidence)
    gain = None
    if share is not None and share < 1:
        what = "in the steps that recompiled, beyond a step that did not" if s.recompile_excess_s is not None else "in recompiles"
        lower = " (for PyTorch a lower bound: Dynamo's dynamic-shape graphs also run slower, without a compile event)" if s.framework == "torch" else ""
        gain = Gain(factor=1 / (1 - share), basis=f"{share:.0%} of the wall time after warm-up went {what}; a step whose arguments keep their shapes and static values compiles once{lower}", kind="estimate")
    changing = "; ".join(guard_words(r["reason"])[:160] for r in s.torch_recompile_reasons[:3])
    top = ", ".join(f"{name} x{n}" for name, n in list(s.late_functions.items())[:3])
    reason = f"{s.late_compiles} recompiles in the {later} steps after warm-up ({per_step:.2f} per step: {top})" + (f"; Dynamo: {changing}" if changing else "")
    causes = s.recompile_causes[:3]
    if causes:
        reason += "; what changed: " + "; ".join(f"{c['function']}: {CAUSES.get(str(c['kind']), c['kind'])} at {c['count']} of them (first {c['example']})" for c in causes)
        evidence += [ev(f"recompiles_by_{c['kind']}", c["count"], "compiles", f"compile.after_warmup_causes[{c['function']}, {c['kind']}]") for c in causes]
    fix = STATIC_FIX if causes and causes[0]["kind"] == "static" else None
    return fired(RECOMPILATION, reason, evidence, gain, fix=fix)


def op_by_op(s: Signals) -> Finding:
    pps = s.programs_per_step
    evidence = [src("distinct_compiled", s.distinct_compiled), ev("step_program_found", int(s.step_program), "hlo", "programs[].is_step")]
    if pps is not None:
        evidence.append(src("programs_per_step", pps))
    if s.framework == "torch":
        return _torch_op_by_op(s)
    if s.pmap_compiles and (pps is None or pps < T.OP_BY_OP_PROGRAMS_PER_STEP):
        return passed(OP_BY_OP, f"the step is compiled by jax.pmap ({s.pmap_compiles} pmap program compile(s))", evidence + [src("pmap_compiles", s.pmap_compiles)])
    if pps is None and s.step_program:
        return passed(OP_BY_OP, f"the step is one jitted program (no trace window to count launches: {s.trace_fix})", evidence)
    if s.jitted_functions is not None:
        evidence.append(src("jitted_functions", s.jitted_functions))
    eager = not s.step_program and (s.distinct_compiled >= T.OP_BY_OP_EAGER_PROGRAMS or (s.jitted_functions == 0 and s.distinct_compiled >= T.OP_BY_OP_UNJITTED_PROGRAMS))
    if not eager and (pps is None or pps < T.OP_BY_OP_PROGRAMS_PER_STEP):
        if pps is None and not s.step_program and not s.compiles:
            return not_evaluable(OP_BY_OP, "no step program, no compiles heard and no program launches per traced step: record the script (tpu-perf record) with its trace window")
        return passed(OP_BY_OP, f"{pps:.1f} programs launched per step" if pps is not None else "few programs compiled", evidence)
    gain, more = _op_by_op_gain(s, pps)
    what = f"{pps:.0f} programs launched per step" if pps is not None else f"no jitted step ({s.jitted_functions if s.jitted_functions is not None else 'unknown'} jax.jit functions, no pmap); {s.distinct_compiled} separate programs compiled"
    return fired(OP_BY_OP, what, evidence + more, gain)


def _op_by_op_gain(s: Signals, pps: float | None) -> tuple[Gain | None, list[Evidence]]:
    """Old step / compiled step, from the untraced step time and the device work of a traced step.

    A compiled step still runs the step's matmuls and collectives; dispatching ops one by one and
    the separate passes of elementwise ops (which XLA fuses into them) go. The trace's host share is
    not used: the profiler's Python tracer slows eager dispatch itself (traced op-by-op steps take
    about twice an untraced one), so that share measures the profiler as much as the step."""
    step, where = s.iteration_median_s, "untraced step" if s.steps > s.traced_steps else "step"
    if not step:
        step, where = s.traced_step_s.get("step_s"), "traced step"
    parts = s.traced_step_s
    if not step or not parts:
        return None, []
    kept = parts.get("matmul", 0.0) + parts.get("collective", 0.0)
    busy = sum(parts.get(p, 0.0) for p in OP_PARTS)
    evidence = [src("iteration_median_s", step) if where != "traced step" else ev("traced_step_s", step, "trace", "breakdown_detail.steps[].step_s (median)"),
                src("traced_matmul_s", kept), src("traced_device_ops_s", busy)]
    launches = f"launching {pps:.0f} programs one by one" if pps is not None else "dispatching ops one by one"
    if kept > 0:
        unfused = f"; with no fusion saving (the {busy * 1e3:.4g} ms of device ops unchanged) it would be {max(1.0, step / busy):.2f}x" if busy > kept else ""
        return Gain(factor=max(1.0, step / kept), basis=f"the {where} takes {step * 1e3:.4g} ms and its matmuls and collectives {kept * 1e3:.4g} ms, which a compiled step still runs; "
                    f"{launches} and the separate elementwise passes XLA fuses away are the rest{unfused} (compile time is the recompilation finding's)", kind="upper_bound"), evidence
    if busy > 0:
        return Gain(factor=max(1.0, step / busy), basis=f"the {where} takes {step * 1e3:.4g} ms and its device ops {busy * 1e3:.4g} ms; compiled, the ops remain and {launches} goes (fusion may save more)", kind="estimate"), evidence
    return None, evidence


def _torch_op_by_op(s: Signals) -> Finding:
    on_tpu = s.platform in ("tpu", "xla") or (s.run_chip is not None and s.run_chip.kind == "tpu")
    evidence = [src("torch_graphs", s.torch_graphs)]
    if s.torch_graphs:
        return passed(OP_BY_OP, f"torch.compile built {s.torch_graphs} graph(s)", evidence)
    if on_tpu or (s.target is not None and s.target.kind == "tpu"):
        return fired(OP_BY_OP, "PyTorch eager (no torch.compile graphs)" + ("" if on_tpu else f": on {s.target.name} every op would be dispatched and compiled separately"), evidence,
                     Gain(factor=None, basis="eager dispatch cost on a TPU depends on the op count; not measurable from a non-TPU run", kind="none"),
                     severity=None if on_tpu else "medium")  # judged for a target, not seen on it
    return passed(OP_BY_OP, "PyTorch eager on CPU/GPU launches kernels directly; pass --target to judge it for a TPU", evidence)


def unrolled_loop(s: Signals) -> Finding:
    if s.hlo is None:
        return not_evaluable(UNROLLED_LOOP, "no optimized HLO of a step program (JAX runs with a jitted step save it)")
    evidence = [src("max_dot_repeats", s.max_dot_repeats), ev("while_loops", s.hlo.while_loops, "hlo", "hlo.analysis.while_loops"),
                src("hlo_instructions", s.hlo_instructions), src("step_compile_s", s.step_compile_s)]
    repeats = s.max_dot_repeats or 0
    if repeats < T.UNROLLED_MIN_REPEATS:
        return passed(UNROLLED_LOOP, f"repeated matmul shapes occur {repeats} time(s) each; {s.hlo.while_loops} while loop(s)", evidence)
    return fired(UNROLLED_LOOP, f"the same matmul shapes occur {repeats} times each ({s.hlo.while_loops} while loops): {repeats} unrolled copies of a layer", evidence,
                 _compile_gain(s, repeats))


def _compile_gain(s: Signals, repeats: int) -> Gain:
    """Compile seconds a scanned layer saves: the step's compile shrinks about with its program."""
    if s.step_compile_s is None:
        return Gain(factor=None, basis="the program holds one layer body instead of several; step time stays about the same, or rises a little where XLA fused across layers", kind="none", benefit="compile_time")
    saved = s.step_compile_s * (1 - 1 / repeats)
    return Gain(factor=None, basis=f"the step compiled in {s.step_compile_s:.2f} s with {repeats} copies of a layer; one copy compiles in about 1/{repeats} of that (compile time grows at least linearly with program size); step time stays about the same", kind="upper_bound", benefit="compile_time", amount=saved, unit="compile_s")


def graph_break(s: Signals) -> Finding:
    if s.framework != "torch":
        return not_evaluable(GRAPH_BREAK, f"applies to torch.compile runs; this run is {s.framework or 'of an unknown framework'}")
    if s.graph_breaks is None or not s.torch_graphs:
        return not_evaluable(GRAPH_BREAK, "the run did not use torch.compile (no Dynamo graphs recorded)")
    evidence = [src("graph_breaks", s.graph_breaks), src("torch_graphs", s.torch_graphs)]
    if s.graph_breaks == 0:
        return passed(GRAPH_BREAK, "no graph breaks", evidence)
    reasons = "; ".join(f"{r['reason']} ({r['count']}x)" + (f" at {_where(r['detail'])}" if _where(r["detail"]) else "") for r in s.graph_break_reasons[:3])
    return fired(GRAPH_BREAK, f"{s.graph_breaks} graph break(s): {reasons}", evidence, Gain(factor=None, basis="a break splits the step into separately compiled graphs with Python in between; the cost depends on where it falls", kind="none"))


def _where(detail: str) -> str | None:
    """The user source line Dynamo names in a graph-break reason (`File "x.py", line 12`)."""
    import re

    found = re.findall(r'File "([^"]+)", line (\d+)', detail or "")
    return f"{found[-1][0]}:{found[-1][1]}" if found else None


def no_compile_cache(s: Signals) -> Finding:
    if s.compiles is None or s.compile_total_s is None:
        return not_evaluable(NO_COMPILE_CACHE, "this run's compiles were not heard (an imported trace, or torch-tpu's own compiles)")
    evidence = [src("compile_total_s", s.compile_total_s), src("compile_cache_events", s.compile_cache_events)]
    if s.compiles == 0:
        return not_evaluable(NO_COMPILE_CACHE, "no compile events recorded")
    if s.framework == "torch":
        return not_evaluable(NO_COMPILE_CACHE, "torch.compile (inductor) caches compiled graphs on disk by default (TORCHINDUCTOR_FX_GRAPH_CACHE); tpu-perf records no cache counters for it")
    if s.compile_cache_events or s.compile_cache_env:
        return passed(NO_COMPILE_CACHE, "a persistent compilation cache is in use", evidence)
    if s.compile_total_s < T.STARTUP_COMPILE_S:
        return passed(NO_COMPILE_CACHE, f"compiles took {s.compile_total_s:.1f} s in all", evidence)
    return fired(NO_COMPILE_CACHE, f"{s.compile_total_s:.1f} s of compiles and no compilation-cache activity", evidence,
                 Gain(factor=None, basis="saves the start-up compiles at every restart (the run's compile seconds); per-step time is unchanged", kind="estimate", benefit="compile_time", amount=s.compile_total_s, unit="compile_s"))
