"""Hooks JAX for one recording: jit tracking, step annotations, compile events, trace window,
device memory, hardware facts and XLA program analysis.

Everything is undone by the returned `uninstall`, so a recording leaves jax as it found it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tpu_perf.collectors.jax import accumulation, callers, distributed
from tpu_perf.collectors.jax.aot import record_topologies
from tpu_perf.collectors.jax.existing import adopt_jitted
from tpu_perf.collectors.jax.jit import JitTracker
from tpu_perf.collectors.jax.profiler import JaxProfilers
from tpu_perf.collectors.jax.programs import analyse_programs
from tpu_perf.collectors.jax.wrappers import patch_pjit
from tpu_perf.collectors.session import Recorder, TraceControl

_COMPILE_EVENTS = {
    "/jax/core/compile/backend_compile_duration": "backend_compile",
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
}
_CACHE_EVENTS = {
    "/jax/compilation_cache/cache_hits": "cache_hit",
    "/jax/compilation_cache/cache_misses": "cache_miss",
}


def compile_caller() -> tuple[str | None, bool]:
    """Who asked for the compile now under way (`path:line`), and whether a checkpointing or
    logging library did (orbax slicing the arrays it saves, at each save): not the step's."""
    here = sys._getframe(1)
    frame = callers.asker(here)
    return (None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"), callers.occasional(here)


def _hardware(jax: Any) -> dict[str, Any]:
    devices = jax.devices()
    first = devices[0]
    return {
        "platform": first.platform,
        "device_kind": first.device_kind,
        "device_count": len(devices),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
    }


def _device_memory_source(jax: Any) -> Callable[[], list[dict[str, Any]]]:
    def sample() -> list[dict[str, Any]]:
        rows = []
        for device in jax.local_devices():
            stats = device.memory_stats()
            if not stats:
                continue
            rows.append({
                "device": f"{device.platform}:{device.id}",
                "bytes_in_use": stats.get("bytes_in_use"),
                "peak_bytes": stats.get("peak_bytes_in_use"),
                "limit_bytes": stats.get("bytes_limit"),
                "source": "jax.memory_stats",
            })
        return rows

    return sample


class ProfilerUnsafe(RuntimeError):
    """Starting jax.profiler here would crash the process."""


def _check_profiler_safe(jax: Any) -> None:
    """Raise unless jax.profiler can start: jax must not have loaded a libtpu it was not built for.

    jaxlib's profiler calls into the libtpu plugin it loaded (on a TPU, or on a CPU machine where
    the plugin failed to find one); when that libtpu is not the one jax pins in its `tpu` extra, the
    profiler API sizes differ and the process segfaults (jaxlib 0.10.2 with libtpu 0.0.52). The
    pair `pip install tpu-perf[tpu]` installs traces fine. Losing the trace beats losing the run.
    """
    from jax._src import xla_bridge

    failed = dict(getattr(xla_bridge, "_backend_errors", {}) or {})
    if "tpu" in failed or jax.default_backend() == "tpu":
        from tpu_perf.pairing import jax_libtpu_mismatch

        bad = jax_libtpu_mismatch()
        if bad is not None:
            raise ProfilerUnsafe(f"jax {bad.version} needs {bad.requirement} (its tpu extra) but libtpu {bad.found} is installed, and jax.profiler crashes with that pair; install the pair jax chose: pip install 'jax[tpu]=={bad.version}' (see `tpu-perf doctor`)")


def _patch_step_annotation(rec: Recorder, jax: Any) -> Callable[[], None]:
    """Make `jax.profiler.StepTraceAnnotation` blocks mark steps too; returns the undo."""
    original = jax.profiler.StepTraceAnnotation

    class StepTraceAnnotation(original):  # type: ignore[misc, valid-type]
        __doc__ = original.__doc__

        def __init__(self, name: str, **kwargs: Any) -> None:
            super().__init__(name, **kwargs)
            self._tpu_perf_step = kwargs.get("step_num")

        def __enter__(self) -> Any:
            rec.boundary("annotation", self._tpu_perf_step)
            return super().__enter__()

        def __exit__(self, *exc: Any) -> Any:
            result = super().__exit__(*exc)
            rec.end_step("annotation")
            return result

    jax.profiler.StepTraceAnnotation = StepTraceAnnotation

    def undo() -> None:
        jax.profiler.StepTraceAnnotation = original

    return undo


class CompileListener:
    """Turns `jax.monitoring` compile and cache events into the run's compile table."""

    def __init__(self, rec: Recorder, tracker: JitTracker) -> None:
        from jax._src import monitoring

        self._monitoring = monitoring
        self._rec = rec
        self._tracker = tracker
        self.paused = False
        """Set while tpu-perf compiles for its own analysis: those compiles are not the script's."""

    def on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        kind = _COMPILE_EVENTS.get(event)
        if kind is None or self.paused:
            return
        extra: dict[str, Any] = {}
        if kind == "backend_compile":
            self._tracker.note_compile()
            extra["caller"], extra["occasional"] = compile_caller()
        self._rec.compile_event(function=str(kwargs.get("fun_name", "")), duration_s=float(duration), event=kind, **extra)

    def on_event(self, event: str, **kwargs: Any) -> None:
        kind = _CACHE_EVENTS.get(event)
        if kind is not None and not self.paused:
            self._rec.compile_event(function=str(kwargs.get("fun_name", "")), duration_s=0.0, event=kind)

    def install(self) -> Callable[[], None]:
        m = self._monitoring
        m.register_event_duration_secs_listener(self.on_duration)
        m.register_event_listener(self.on_event)

        def undo() -> None:
            for unregister, callback in ((m.unregister_event_duration_listener, self.on_duration), (m.unregister_event_listener, self.on_event)):
                try:
                    unregister(callback)
                except Exception:  # already gone: nothing to undo
                    pass

        return undo


def _identity(x: Any) -> Any:
    return x


def accumulation_facts(step_fn: Any, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`run.json` `accumulation`: micro-batches per optimizer update, and what said so."""
    if step_fn is not None and step_fn.micro_batches is not None:
        k, by = step_fn.micro_batches or None, step_fn.accumulated_by
        note = None if k else f"{by} with a schedule: each call of the step function is counted as a step (micro-batches per update unknown)"
        return {"micro_batches": k, "by": by, "note": note}
    loops = [int(r["calls_per_step"]) for r in rows if not r.get("is_step") and (r.get("calls_per_step") or 0) >= 2]
    if loops:  # a hand-written loop: a micro-batch program N times, then the update
        return {"micro_batches": max(loops), "by": "loop", "note": None}
    return None


def install(rec: Recorder, jax: ModuleType) -> Callable[[], None]:
    """Hook `jax` (already imported by the script) into `rec`; returns the undo function."""
    import jax.profiler

    tracker = JitTracker(rec, jax)
    original_jit, original_pmap = jax.jit, jax.pmap
    jax.jit = tracker.wrap_jit(original_jit)
    jax.pmap = tracker.wrap_jit(original_pmap, kind="pmap")
    undos = [tracker.stamper.install(jax), _patch_step_annotation(rec, jax), patch_pjit(jax.jit), tracker.outer.install(), distributed.install(rec, jax), accumulation.install(tracker.accumulates)]
    rec.adopters.append(lambda spaces: adopt_jitted(tracker, spaces, jit_type=type(original_jit(_identity))))
    listener = CompileListener(rec, tracker)
    undos.append(listener.install())
    rec.add_sync(tracker.sync_all)
    rec.add_drain(tracker.drain)
    rec.add_before_close(tracker.fallback)
    rec.add_before_close(tracker.close)

    def write_requests() -> None:  # generation: a prefill before each run of decode steps (prefill.py)
        if rec.generation is not None and rec.generation.requests:
            return  # the script marked its requests (tpu_perf.request()): those are its requests, not a second set read from its calls
        for row in tracker.prefills.rows(tracker.step_fn, tracker.source):
            rec.append("requests", row)

    rec.add_before_close(write_requests)

    profilers = JaxProfilers(rec, jax)
    undos.append(profilers.install(jax))
    tracker.discard_trace = lambda: (profilers.join(), shutil.rmtree(profilers.trace_dir / "plugins", ignore_errors=True))
    rec.add_finalizer(profilers.join)  # after the last window's stop, before its files are read
    rec.offer_trace(TraceControl(start=lambda: profilers.own_start(str(profilers.trace_dir), lambda: _check_profiler_safe(jax)), stop=profilers.own_stop, name="jax.profiler"))

    seen_hardware = False

    def on_boundary(index: int) -> None:
        nonlocal seen_hardware
        if not seen_hardware:  # the backend is surely initialised once a step ran
            seen_hardware = True
            rec.writer.update_manifest(hardware=_hardware(jax))
            rec.add_sample_source("jax", _device_memory_source(jax))

    rec.on_boundary(on_boundary)

    def finalize() -> None:
        listener.paused = True
        if not seen_hardware and tracker.functions:
            rec.writer.update_manifest(hardware=_hardware(jax))
        counts = {"jitted_functions": len(tracker.functions), "compilation_cache_dir": getattr(jax.config, "jax_compilation_cache_dir", None)}  # for the advisor
        if tracker.step_fn is not None:  # host syncs per step, for the advisor's host-sync rule
            counts.update(step_calls=tracker.step_fn.calls, fetched_step_calls=tracker.step_fn.fetched_calls)
        if tracker.recompiles:
            counts["recompile_causes"] = tracker.recompiles
        rec.writer.update_manifest(jax=counts)
        failed = tracker.oom[0] if tracker.oom else None
        if tracker.oom:  # the run failed out of device memory: say where, analyse that program
            rec.writer.update_manifest(out_of_memory={"function": failed.name, "message": tracker.oom[1]})
        rows = analyse_programs(tracker.functions, tracker.step_fn or failed, rec, jax)
        if rows:
            rec.writer.write_table("programs", rows)
        accumulated = accumulation_facts(tracker.step_fn, rows)
        if accumulated:
            rec.writer.update_manifest(accumulation=accumulated)
        record_topologies(tracker.step_fn, rec.options.topologies, jit=original_jit, jax=jax, writer=rec.writer, warn=rec.warn, log=rec.log)

    rec.add_finalizer(finalize)

    def uninstall() -> None:
        jax.jit, jax.pmap = original_jit, original_pmap
        for undo in reversed(undos):
            undo()

    return uninstall
