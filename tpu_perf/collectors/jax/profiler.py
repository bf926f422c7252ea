"""The script's own `jax.profiler` trace wins over tpu-perf's trace window.

JAX allows one trace at a time: a script that calls `jax.profiler.start_trace` (or enters
`jax.profiler.trace`) while tpu-perf's window is open would die with "Profile has already been
started". `start_trace`/`stop_trace` are wrapped for the recording: when the script starts its own
trace, tpu-perf stops its window first (or never opens it), says so in one warning, and copies the
script's trace into the run afterwards, so the op tables come from the same steps.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpu_perf.collectors.session import Recorder
from tpu_perf.store import layout


class ScriptProfiling(RuntimeError):
    """The script runs its own profiler session: tpu-perf does not start one."""


class JaxProfilers:
    """Owns the original start/stop functions; the recorder's window uses these, the script the wrappers."""

    def __init__(self, rec: Recorder, jax: Any) -> None:
        from jax._src import profiler as src

        self.rec = rec
        self.src = src
        self.original_start = src.start_trace
        self.original_stop = src.stop_trace
        self._user_dir: str | None = None
        self._user_started = 0.0
        self._own_partial = False
        self._stopping: threading.Thread | None = None
        """tpu-perf's own stop, running on a thread of its own (`own_stop`)."""

    @property
    def trace_dir(self) -> Path:
        """Read when used: the run folder moves when the process joins a job (collectors/job.py)."""
        return Path(self.rec.writer.dir) / layout.TRACE_DIR

    # -- tpu-perf's own window ------------------------------------------------------------------
    def own_start(self, log_dir: str, guard: Callable[[], None]) -> None:
        self.join()
        if self._user_dir is not None or getattr(self.src._profile_state, "profile_session", None) is not None:
            raise ScriptProfiling("the script runs its own jax.profiler trace; tpu-perf leaves profiling to it")
        guard()
        self.original_start(log_dir)

    def own_stop(self) -> None:
        """Stop tpu-perf's window on a thread of its own: the stop collects and writes the trace
        (0.6 s where libtpu's profiler plugin is installed, even with no TPU), which the script's
        loop would otherwise wait out inside a step; it runs on meanwhile (measured: 8,332 more
        steps during a 0.596 s stop, none slower than 4.7 ms). `join` waits for it wherever the
        trace is needed next: another window, the script's own trace, its files read or deleted."""
        self._stopping = threading.Thread(target=self._stop, name="tpu-perf-trace-stop", daemon=True)
        self._stopping.start()

    def _stop(self) -> None:
        try:
            self.original_stop()
        except Exception as exc:  # noqa: BLE001 -- a failed stop loses the trace, never the run
            self.rec.warn(f"the trace window's stop failed ({type(exc).__name__}: {exc}); the run has no op tables")

    def join(self) -> None:
        """Wait for tpu-perf's own stop, if one is running."""
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            stopping.join()

    # -- the script's calls ---------------------------------------------------------------------
    def start_trace(self, log_dir: Any, *args: Any, **kwargs: Any) -> None:
        self.join()
        self._own_partial |= self.rec.yield_trace(f"the script profiles itself (jax.profiler trace into {log_dir}): tpu-perf left the trace window to it and reads the script's trace instead")
        self.original_start(log_dir, *args, **kwargs)
        self._user_dir, self._user_started = str(log_dir), time.time()

    def stop_trace(self, *args: Any, **kwargs: Any) -> None:
        self.original_stop(*args, **kwargs)
        user_dir, self._user_dir = self._user_dir, None
        if user_dir is not None:
            self._adopt(Path(user_dir), self._user_started)

    def _adopt(self, user_dir: Path, since: float) -> None:
        """Copy the script's new xplane files into the run, in place of a window cut short."""
        if self._own_partial:
            shutil.rmtree(self.trace_dir / "plugins", ignore_errors=True)
            self._own_partial = False
        elif any(self.trace_dir.rglob("*.xplane.pb")):
            return
        for xplane in user_dir.glob("plugins/profile/*/*.xplane.pb"):
            if xplane.stat().st_mtime >= since - 1:
                target = self.trace_dir / "plugins" / "profile" / xplane.parent.name / xplane.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(xplane, target)

    def install(self, jax: Any) -> Callable[[], None]:
        """Wrap start/stop in `jax.profiler` and in the module its `trace()` context manager calls."""
        import jax.profiler

        src = self.src
        start, stop = self.start_trace, self.stop_trace
        saved = (jax.profiler.start_trace, jax.profiler.stop_trace)
        src.start_trace, src.stop_trace = start, stop
        jax.profiler.start_trace, jax.profiler.stop_trace = start, stop

        def undo() -> None:
            src.start_trace, src.stop_trace = self.original_start, self.original_stop
            jax.profiler.start_trace, jax.profiler.stop_trace = saved

        return undo
