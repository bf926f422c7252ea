"""The trace window for PyTorch: Kineto via `torch.profiler`, or torch-tpu's xplane profiler.

Steps START:STOP are captured by starting the profiler at the boundary that opens step START and
stopping it at the one that opens STOP (the recorder drives both), which is what a
`torch.profiler.schedule(wait=START, active=STOP-START)` would do. On CPU/CUDA the Kineto trace
lands in `trace/<host>.<ms>.pt.trace.json.gz` (opens in Perfetto). With a TPU attached, torch-tpu's
profiler writes `trace/plugins/profile/<ts>/<host>.xplane.pb`, the XProf log-dir layout of JAX runs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpu_perf.collectors.session import TraceControl


class KinetoWindow:
    """One `torch.profiler.profile` started and stopped by the recorder."""

    def __init__(self, torch: Any, trace_dir: Path) -> None:
        self.torch = torch
        self.trace_dir = trace_dir
        self._prof: Any = None

    def start(self) -> None:
        profiler = self.torch.profiler
        activities = [profiler.ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        handler = profiler.tensorboard_trace_handler(str(self.trace_dir), worker_name=socket.gethostname(), use_gzip=True)
        # No record_shapes: nothing reads the shapes, and recording them made the traced steps of a
        # small GPT-2 1.3-4x slower than the others (docs/traces.md), which skews every share of the breakdown.
        prof = profiler.profile(activities=activities, on_trace_ready=handler)
        prof._tpu_perf_own = True  # not a step source (see steps.patch_profiler)
        prof.start()
        self._prof = prof

    def stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()  # calls on_trace_ready: the trace file is written here


class TpuWindow:
    """torch-tpu's documented profiler (`torch_tpu._internal.profiler.profile` + xprof handler)."""

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir = trace_dir
        self._cm: Any = None

    def start(self) -> None:
        from torch_tpu._internal import profiler  # only reached with a TPU attached

        self.trace_dir.mkdir(parents=True, exist_ok=True)
        cm = profiler.profile(activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.TPU], on_trace_ready=profiler.xprof_trace_handler(str(self.trace_dir)))
        cm.__enter__()
        self._cm = cm

    def stop(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)


class TorchTrace:
    """Chooses the profiler when the window opens: by then the training device is known."""

    def __init__(self, torch: Any, trace_dir: Callable[[], Path], device_type: Any, check: Callable[[], None] = lambda: None) -> None:
        self.torch = torch
        self.trace_dir = trace_dir
        """Called when the window opens: the run folder moves when the process joins a job."""
        self._device_type = device_type
        self._check = check
        """Raises when the window must not open (the script runs its own profiler)."""
        self._window: KinetoWindow | TpuWindow | None = None

    def start(self) -> None:
        self._check()
        kind = self._device_type()
        trace_dir = self.trace_dir()
        self._window = TpuWindow(trace_dir) if kind == "tpu" else KinetoWindow(self.torch, trace_dir)
        self._window.start()

    def stop(self) -> None:
        window, self._window = self._window, None
        if window is not None:
            window.stop()

    def control(self) -> TraceControl:
        return TraceControl(start=self.start, stop=self.stop, name="torch.profiler")
