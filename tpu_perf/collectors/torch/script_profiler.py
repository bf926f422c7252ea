"""The script's own `torch.profiler` wins over tpu-perf's trace window.

Two Kineto sessions at once break the script's: with an `on_trace_ready` handler the process
segfaults, without one `prof.events()` comes back empty. When the script starts a profiler,
tpu-perf stops its window first (or never opens it), warns once, and keeps the script's trace in
the run so the op tables come from the same steps: the file its `on_trace_ready` handler wrote
(`tensorboard_trace_handler` or any handler that calls `export_chrome_trace`) is copied as it is,
since Kineto saves a trace once and a second export raises "Trace is already saved"; a profiler
with no handler, or one whose handler exported nothing, is exported into the run at its stop.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpu_perf.collectors.session import Recorder
from tpu_perf.store import layout


class ScriptProfiling(RuntimeError):
    """The script runs its own profiler: tpu-perf does not start one."""


class ScriptProfilers:
    """Counts the script's open profilers; the trace window asks `check()` before it starts."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.open = 0
        self._own_partial = False
        self._adopted = False

    @property
    def trace_dir(self) -> Path:
        """Read when used: the run folder moves when the process joins a job (collectors/job.py)."""
        return Path(self.rec.writer.dir) / layout.TRACE_DIR

    def check(self) -> None:
        if self.open:
            raise ScriptProfiling("the script runs its own torch.profiler; tpu-perf leaves profiling to it")

    def started(self, what: str) -> None:
        """Call before the script's profiler starts."""
        self._own_partial |= self.rec.yield_trace(f"the script profiles itself ({what}): tpu-perf left the trace window to it and reads the script's trace instead")
        self.open += 1

    def exported(self, path: str) -> None:
        """Call after the script's profiler wrote its trace to `path` (its handler's file): keep a
        copy of the first one (one window of steps; more files would read as more hosts)."""
        src = Path(path)
        if not src.is_file():
            return
        suffix = ".pt.trace.json.gz" if src.name.endswith(".gz") else ".pt.trace.json"
        self._keep(lambda dest: shutil.copyfile(src, dest), suffix)

    def stopped(self, prof: Any) -> None:
        """Call after the script's profiler stopped: keep its trace in the run if no handler did."""
        self.open = max(0, self.open - 1)
        self._keep(lambda dest: prof.export_chrome_trace(str(dest)), ".pt.trace.json")

    def _keep(self, write: Callable[[Path], object], suffix: str) -> None:
        """Write the script's trace into the run once, replacing a partial window of tpu-perf's own."""
        if self._adopted:
            return
        has_own = any(self.trace_dir.glob("*.json*")) if self.trace_dir.exists() else False
        if has_own and not self._own_partial:
            return
        try:
            if self._own_partial:
                shutil.rmtree(self.trace_dir, ignore_errors=True)
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            self._adopted = True  # before the write: our own export passes through exported() too
            write(self.trace_dir / f"{socket.gethostname()}.script{suffix}")
        except Exception as exc:  # no events kept (a schedule that never went active...): no table
            self._adopted = False
            self.rec.warn(f"the script's own torch.profiler trace could not be kept ({type(exc).__name__}: {exc})")
