"""The live recording: one `Recorder` per `tpu-perf record`, shared by every collector.

Collectors only observe and write. They reach the run folder through the recorder, which stamps
every record with host, process index and a time on one clock (epoch seconds, from a monotonic
counter anchored once, so intervals are exact and tables from different sources line up).
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpu_perf import marks
from tpu_perf.collectors import forks
from tpu_perf.collectors.core_wait import core_wait
from tpu_perf.collectors.sampler import DEFAULT_SAMPLE_INTERVAL_S, Rows, Sampler, SampleSource
from tpu_perf.collectors.steps import StepTracker
from tpu_perf.store import RunWriter, layout

FLUSH_INTERVAL_S = 0.5
"""Append-only tables reach the OS at least this often (the store promises at most 1 s)."""

SWITCH_INTERVAL_S = 0.001
"""GIL switch interval while recording (CPython's default is 5 ms). The flush and sampler threads
need the GIL briefly; with the default, a loop busy in Python would starve them for 5 ms per hand-off
and samples would arrive late and sparse. Our threads ask rarely, so more frequent switching costs
the loop next to nothing (bench/runtime_overhead.py)."""

PROGRESS_INTERVAL_S = 15.0
"""One progress line at most this often: visible in logs without flooding them."""


TRACE_EXTRA_STEPS = 3
"""Steps the trace stays open past its window while the traced steps' device work runs (a TPU
queues a few steps ahead), however long they take."""

TRACE_HOLD_S = 2.0
"""Seconds the trace stays open past its window while the traced steps' device work runs, however
many steps the host dispatches meanwhile (XLA:CPU queues without bound): the host ran ahead of the
device, and the trace must hold the traced steps' programs for the breakdown to frame them where
the device ran them. The hold ends at the first step or sync after the traced work is done; that
step is `instrumented` (it holds the stop). Steps dispatched while it is held are neither traced nor
instrumented: their host ran ahead of the device, which sets their pace, so the profiler's cost on
the host does not lengthen them (flagging them would leave a run-ahead loop no steady steps)."""

@dataclass(kw_only=True)
class RecordOptions:
    """What `tpu-perf record` was asked for; stored in run.json under `config`."""

    trace_steps: tuple[int, int] | None = (3, 6)
    """Steps [start, stop) to capture in a trace window; None turns tracing off."""
    tokens_per_step: int | None = None
    flops_per_step: float | None = None
    chip: str | None = None
    warmup_steps: int | None = None
    model: str | None = None
    """A model preset name (see `tpu-perf mfu --help`) for model-FLOPs MFU."""
    hf_config: str | None = None
    """Path of a Hugging Face config.json describing the model, for model-FLOPs MFU."""
    convention: str | None = None
    """Model-FLOPs convention for this run's MFU (see `tpu-perf mfu --help`); None: the default."""
    architecture: dict[str, Any] | None = None
    """The model's shapes resolved from `model` / `hf_config` at record time, so the run is self-contained."""
    calibration: dict[str, Any] | None = None
    """The store's measured peaks (`tpu-perf calibrate --save`) when recording began, by device key."""
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S
    """Seconds between runtime samples (memory, duty cycle, host); see docs/runtime.md for its cost."""
    tpu_metrics_addr: str | None = None
    """HOST:PORT of libtpu's metric service; None: TPU_PERF_TPU_METRICS_ADDR, libtpu's port, localhost:8431."""
    batch_size: int | None = None
    """Global batch size per step, for the largest-batch estimate."""
    topologies: tuple[str, ...] = ()
    """TPU slices (`v6e:2x2`, ...) to compile the JAX step for after the run (docs/aot.md)."""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.trace_steps is not None:
            start, stop = self.trace_steps
            if start < 0 or stop <= start:
                raise ValueError(f"trace window {start}:{stop} must satisfy 0 <= START < STOP")
        for name in ("tokens_per_step", "flops_per_step", "warmup_steps", "batch_size"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.sample_interval_s <= 0:
            raise ValueError("sample interval must be > 0 seconds")
        if self.tpu_metrics_addr is not None:
            host, sep, port = self.tpu_metrics_addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"TPU metrics address {self.tpu_metrics_addr!r}: expected HOST:PORT, e.g. localhost:8431")


@dataclass
class TraceControl:
    """How one framework starts and stops its profiler; the first collector to offer one owns it."""

    start: Callable[[], None]
    stop: Callable[[], None]
    name: str = ""
    active: bool = field(default=False, init=False)
    done: bool = field(default=False, init=False)


class Recorder:
    """Shared state of a recording: the writer, the clock, steps, compile events, hooks."""

    def __init__(self, writer: RunWriter, options: RecordOptions, *, log: Callable[[str], None]) -> None:
        self.writer = writer
        self.options = options
        self.log = log
        self.host = layout.hostname()
        self.process_index = 0
        self.job_id: str | None = None
        """The multi-process job this recording joined (collectors/job.py); None until then."""
        self._perf0 = time.perf_counter()
        self._epoch0 = time.time()
        self._syncs: list[Callable[[], None]] = []
        self._finalizers: list[Callable[[], None]] = []
        self._before_close: list[Callable[[], None]] = []
        self.traced_in_flight: Callable[[], bool] = lambda: False
        """Whether device work dispatched inside the trace window is still running (set by the JAX
        collector): the window stays open until it is done, so a loop that queues steps ahead of
        the device gets its traced steps' device work into the trace."""
        self._drains: list[Callable[[], None]] = []
        self._boundary_hooks: list[Callable[[int], None]] = []
        self._compile_lock = threading.Lock()
        self._compile_ends: list[float] = []
        self._compile_starts: list[float] = []
        self.trace: TraceControl | None = None
        self._trace_held_since: float | None = None
        self._trace_lock = threading.Lock()
        """When the trace window's steps ended with their device work still running (the trace is held open)."""
        self.steps = StepTracker(self._emit_step, self.compile_seconds)
        self.steps.traced = lambda: self.trace_active
        self._recent: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.warnings: list[str] = []
        self._switch_interval = sys.getswitchinterval()
        self.forked = False
        """True in a child forked from the recording process: it records and finalises nothing."""
        self.sampler = Sampler(options.sample_interval_s, self.now, self.append, self.warn)
        self.generation: Any = None
        """The generation requests' log (collectors/generation.py), once installed."""
        self.adopters: list[Callable[[list[dict[str, Any]]], Callable[[], None]]] = []
        """Collectors that can hook objects made before recording began (a notebook's earlier
        cells): each takes namespaces to look in and returns the undo (`tpu_perf.record`)."""
        self._add_runtime_sources()

    # -- clock ----------------------------------------------------------------------------------
    def now(self) -> float:
        """Epoch seconds on the recording's monotonic clock."""
        return self._epoch0 + (time.perf_counter() - self._perf0)

    # -- hooks collectors register --------------------------------------------------------------
    def add_sync(self, sync: Callable[[], None]) -> None:
        """A function that blocks until the device finished the work queued so far."""
        self._syncs.append(sync)

    def add_finalizer(self, finalize: Callable[[], None]) -> None:
        """Runs once after the script ended (success or not), before the tables are compacted."""
        self._finalizers.append(finalize)

    def add_before_close(self, hook: Callable[[], None]) -> None:
        """Runs at the end of the script, before the last step is closed (late step detection)."""
        self._before_close.append(hook)

    def add_drain(self, drain: Callable[[], None]) -> None:
        """Runs on the flush thread before each flush: collectors hand over buffered records here."""
        self._drains.append(drain)

    def add_sample_source(self, name: str, sample: Callable[[], Rows], table: str = "memory") -> None:
        """A time series to sample every `sample_interval_s` on the sampler thread."""
        self.sampler.add(SampleSource(name, sample, table))

    def _add_runtime_sources(self) -> None:
        from tpu_perf.collectors import imports
        from tpu_perf.collectors.runtime import default_sources, torch_source

        for source in default_sources(tpu_metrics_addr=self.options.tpu_metrics_addr, interval_s=self.options.sample_interval_s, log=self.log, note=self.sampler.note):
            self.sampler.add(source)
        imports.when_imported("torch", lambda torch: self.sampler.add(torch_source(torch)))

    def on_boundary(self, hook: Callable[[int], None]) -> None:
        self._boundary_hooks.append(hook)

    def offer_trace(self, control: TraceControl) -> None:
        if self.trace is None and self.options.trace_steps is not None:
            self.trace = control

    def mark_instrumented(self) -> None:
        """tpu-perf did extra work inside the open step (FLOP counting...): keep it out of the statistics."""
        self.steps.mark_instrumented()

    def warn(self, message: str) -> None:
        """A one-line warning shown at the end and kept in run.json."""
        if message not in self.warnings:
            self.warnings.append(message)

    # -- records --------------------------------------------------------------------------------
    def append(self, table: str, record: dict[str, Any]) -> None:
        """Append to a run table with host and process index stamped on."""
        record.setdefault("host", self.host)
        record.setdefault("process_index", self.process_index)
        self.writer.append(table, record)

    def compile_event(self, *, function: str, duration_s: float, event: str, end_time_s: float | None = None, **extra: Any) -> None:
        """A compile (or cache hit/miss) seen by a framework hook; `duration_s` may be 0 for counters."""
        end = self.now() if end_time_s is None else end_time_s
        if event == "backend_compile" and duration_s > 0:
            with self._compile_lock:
                i = bisect.bisect(self._compile_ends, end)
                self._compile_ends.insert(i, end)
                self._compile_starts.insert(i, end - duration_s)
        self.append("compiles", {"time_s": end, "duration_s": duration_s, "function": function, "event": event, **extra})

    def compile_seconds(self, start: float, end: float) -> float:
        """Seconds of backend compilation that ended within [start, end]."""
        with self._compile_lock:
            lo = bisect.bisect_left(self._compile_ends, start)
            hi = bisect.bisect_right(self._compile_ends, end)
            return sum(self._compile_ends[i] - self._compile_starts[i] for i in range(lo, hi))

    def _emit_step(self, record: dict[str, Any]) -> None:
        self.append("steps", record)
        self._recent.append(record["duration_s"])
        del self._recent[:-20]

    # -- step boundaries (the StepSink protocol of tpu_perf.marks) ------------------------------
    def sync(self) -> None:
        for sync in self._syncs:
            try:
                sync()
            except Exception as exc:  # a failed sync must never break the user's loop
                self.warn(f"device sync failed ({type(exc).__name__}: {exc}); step times may include dispatch only")

    def boundary(self, source: str, step_num: int | None = None) -> None:
        """A step starts now; the previous one (if any) ends once the device finished its work."""
        if not self.steps.accepts(source):
            return
        self.sync()
        index = self.steps.boundary(source, self.now())
        if index is None:
            return
        start, tracing, waited, cpu = self.now(), self.trace_active or self.trace_held, core_wait(), time.process_time()
        self.before_step(index)
        if tracing and not (self.trace_active or self.trace_held):  # the trace stopped here: its cost is the new step's
            self.steps.mark_instrumented()
            self.steps.open(source, start, step_num, waited=waited, cpu=cpu)
        else:
            if not tracing and self.trace_active:  # it started here: its cost ends the step before, held for its end
                self.steps.mark_current_instrumented()
            self.steps.open(source, self.now(), step_num)

    def end_step(self, source: str) -> None:
        if not self.steps.accepts(source):
            return
        self.sync()
        self.steps.end(source, self.now())

    def span(self, source: str, start: float, end: float, *, traced: bool = False, step_num: int | None = None, device_known: bool = True, interleaved: bool = False, busy: bool = False, instrumented: bool = False, cpu: float | None = None) -> None:
        """A complete step from dispatch to device completion (any thread may call this);
        `device_known` False: `end` is when tpu-perf looked, an upper bound of the device time.
        `busy`: the step's device time is the reported device work inside its iteration. `cpu`: the
        process's CPU time (`time.process_time()`) read at the step's dispatch."""
        self.steps.span(source, start, end, traced=traced, step_num=step_num, device_known=device_known, interleaved=interleaved, busy=busy, instrumented=instrumented, cpu=cpu)

    def waited(self, start: float, end: float) -> None:
        """The loop was blocked in a framework call from `start` to `end` (a device sync, a
        collective, backward()): a step's `wait_s`; the rest of its iteration is this host's own work."""
        self.steps.waited(start, end)

    def called(self, start: float, end: float) -> None:
        """The loop was inside a call of a jitted function from `start` to `end`: a step's `call_s`;
        its `loop_s` is the rest of the iteration outside calls and waits (the input pipeline's)."""
        self.steps.called(start, end)

    @property
    def trace_active(self) -> bool:
        """Inside the trace window: steps dispatched now are traced."""
        return bool(self.trace and self.trace.active) and self._trace_held_since is None

    @property
    def trace_held(self) -> bool:
        """Past the window's steps, the trace held open while their device work runs."""
        return bool(self.trace and self.trace.active) and self._trace_held_since is not None

    def before_step(self, index: int) -> None:
        """Call on the main thread just before step `index` starts: opens/closes the trace window."""
        trace, window = self.trace, self.options.trace_steps
        if trace is not None and window is not None and not trace.done:
            start, stop = window
            if not trace.active and start <= index < stop:
                self._trace_call(trace, trace.start, active=True)
            elif trace.active and index >= stop:
                held = self._trace_held_since
                if self.traced_in_flight() and (held is None or index < stop + TRACE_EXTRA_STEPS or self.now() - held < TRACE_HOLD_S):
                    self._trace_held_since = self.now() if held is None else held
                else:
                    self._trace_call(trace, trace.stop, active=False)
        for hook in self._boundary_hooks:
            hook(index)

    def release_held_trace(self, mark_current: Callable[[], None] | None = None) -> None:
        """After the script synced: stop a trace held open for traced device work that is now done
        (a loop whose host ran ahead may dispatch no further step). The step under way holds the stop:
        `mark_current` flags it where a collector builds steps later from spans (the JAX tracker)."""
        trace = self.trace
        if trace is not None and self.trace_held and not self.traced_in_flight():
            (mark_current or self.steps.mark_current_instrumented)()
            self._trace_call(trace, trace.stop, active=False)

    def yield_trace(self, reason: str) -> bool:
        """The script starts its own profiler: stop tpu-perf's window (or never open it), warn once.

        True when a window was open and got cut short (its trace is partial)."""
        trace = self.trace
        if trace is None or trace.done:
            return False
        cut = trace.active
        if cut:
            self._trace_call(trace, trace.stop, active=False)
        trace.done = True
        self.warn(reason)
        return cut

    def _trace_call(self, trace: TraceControl, call: Callable[[], None], *, active: bool) -> None:
        with self._trace_lock:  # a held trace may be stopped by a sync on another thread
            if trace.active == active or trace.done:
                return
            try:
                call()
                trace.active = active
                trace.done = not active
            except Exception as exc:
                trace.active, trace.done = False, True
                self.warn(f"no trace window: {exc}")
            finally:
                if not trace.active:
                    self._trace_held_since = None

    # -- lifecycle ------------------------------------------------------------------------------
    def detach_after_fork(self) -> None:
        """In a forked child: stop recording and leave the run to the parent (see forks.py)."""
        self.forked = True
        marks.set_sink(None)
        self.writer.detach()
        if self.trace is not None:
            if self.trace.active:  # the profiler's Python tracer would call into its C++ session, orphaned here
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
            self.trace.active, self.trace.done = False, True
        self._syncs.clear()
        self._boundary_hooks.clear()

    def start(self) -> None:
        forks.watch(self)
        marks.set_sink(self)
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL_S))

        self._thread = threading.Thread(target=self._background, name="tpu-perf-flush", daemon=True)
        self._thread.start()
        self.sampler.start()

    def _background(self) -> None:
        last_beat = last_progress = time.monotonic()
        while not self._stop.wait(FLUSH_INTERVAL_S):
            with forks.quiet:
                last_beat, last_progress = self._flush_once(last_beat, last_progress)

    def _flush_once(self, last_beat: float, last_progress: float) -> tuple[float, float]:
        """One round of the flush thread; returns when the heartbeat and progress line last ran."""
        try:
            for drain in self._drains:
                drain()
            self.writer.flush()
            self.writer.sync_remote()  # a remote store: at most every few seconds
            now = time.monotonic()
            if now - last_beat >= layout.HEARTBEAT_INTERVAL_S:
                self.writer.write_manifest()
                last_beat = now
            if self.options.progress and now - last_progress >= PROGRESS_INTERVAL_S and self.steps.closed:
                self.log(self.progress_line())
                last_progress = now
        except Exception as exc:  # never let the flusher die silently
            self.warn(f"background flush failed: {type(exc).__name__}: {exc}")
        return last_beat, last_progress

    def progress_line(self) -> str:
        recent = sorted(self._recent)
        median = recent[len(recent) // 2] if recent else float("nan")
        return f"tpu-perf: {self.steps.closed} steps, last {self.steps.last_duration_s or 0:.4f} s, median of last {len(recent)} {median:.4f} s"

    def finish(self) -> None:
        """Close the last step, stop the trace, run collector finalizers, stop the flusher."""
        marks.set_sink(None)
        self.sync()
        for hook in self._before_close:
            self._guarded(hook)
        self.steps.close_open(self.now())
        if self.trace is not None and self.trace.active:
            self._trace_call(self.trace, self.trace.stop, active=False)
        self.sampler.stop()
        for finalize in self._finalizers:
            self._guarded(finalize)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for drain in self._drains:
            self._guarded(drain)
        self.writer.flush()
        sys.setswitchinterval(self._switch_interval)
        forks.unwatch(self)


    def _guarded(self, hook: Callable[[], None]) -> None:
        try:
            hook()
        except Exception as exc:
            self.warn(f"{getattr(hook, '__qualname__', hook)} failed: {type(exc).__name__}: {exc}")
