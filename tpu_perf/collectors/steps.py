"""Turns step marks from several sources into step records.

Sources rank by how much they know (`tpu_perf.store.layout.STEP_SOURCE_RANK`): an explicit
`tpu_perf.step()` beats a framework annotation (`jax.profiler.StepTraceAnnotation`,
`torch.profiler` `prof.step()`), which beats automatic detection (the jitted step function,
optimizer hooks). Once a better source speaks, worse ones are ignored and counting restarts.

Two kinds of marks arrive:
- boundaries (`boundary`, `end`): a step runs from one mark to the next, taken after a device sync;
- spans (`span`): a complete step whose start and device-completion times are already known.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_perf.store.layout import source_rank


@dataclass
class _OpenStep:
    index: int
    start: float
    source: str
    step_num: int | None
    traced: bool = False
    instrumented: bool = False
    interleaved: bool = False


class StepTracker:
    """Opens and closes steps; writes one record per closed step through `emit`."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], compile_seconds: Callable[[float, float], float]) -> None:
        self._emit = emit
        self._compile_seconds = compile_seconds
        self._lock = threading.RLock()
        self._open: _OpenStep | None = None
        self._source: str | None = None
        self._next_index = 0
        self.traced: Callable[[], bool] = lambda: False
        self.closed = 0
        self.last_duration_s: float | None = None
        self._instrument_next = False

    @property
    def source(self) -> str | None:
        return self._source

    @property
    def next_index(self) -> int:
        return self._next_index

    def accepts(self, source: str) -> bool:
        return self._source is None or source_rank(source) <= source_rank(self._source)

    def _switch(self, source: str) -> bool:
        """Adopt `source` if it is at least as good as the current one; False if it is ignored."""
        if not self.accepts(source):
            return False
        if self._source is not None and source_rank(source) < source_rank(self._source):
            self._open, self._next_index = None, 0  # a better source: restart counting
        self._source = source
        return True

    # -- boundary marks ---------------------------------------------------------------------------
    def boundary(self, source: str, now: float) -> int | None:
        """Close the open step at `now`; returns the index the next step will have."""
        with self._lock:
            if not self._switch(source):
                return None
            self._close(now)
            return self._next_index

    def open(self, source: str, start: float, step_num: int | None = None) -> None:
        with self._lock:
            if self._source != source:
                return
            self._open = _OpenStep(self._next_index, start, source, step_num, self.traced(), self._instrument_next)
            self._instrument_next = False
            self._next_index += 1

    def end(self, source: str, now: float) -> None:
        """Close the open step (a `with` block exited) without opening another."""
        with self._lock:
            if self._source is not None and source_rank(source) == source_rank(self._source):
                self._close(now)

    def close_open(self, now: float) -> None:
        with self._lock:
            self._close(now)

    def mark_instrumented(self) -> None:
        """Mark the open step; from a boundary hook (no step open yet), the step about to open."""
        with self._lock:
            if self._open is not None:
                self._open.instrumented = True
            else:
                self._instrument_next = True

    def mark_interleaved(self) -> None:
        """The open step also ran an eval or a checkpoint: a long iteration for a known reason."""
        with self._lock:
            if self._open is not None:
                self._open.interleaved = True

    def discard_open(self) -> None:
        """Drop the open step unwritten: the time after the last detected step is no step."""
        with self._lock:
            self._open = None

    # -- span marks -------------------------------------------------------------------------------
    def span(self, source: str, start: float, end: float, *, traced: bool = False, step_num: int | None = None, interleaved: bool = False) -> None:
        """Write a complete step [start, end]."""
        with self._lock:
            if not self._switch(source):
                return
            self._open = _OpenStep(self._next_index, start, source, step_num, traced, interleaved=interleaved)
            self._next_index += 1
            self._close(end)

    def _close(self, end: float) -> None:
        step = self._open
        if step is None:
            return
        self._open = None
        duration = max(0.0, end - step.start)
        compile_s = self._compile_seconds(step.start, end)
        record = {
            "step": step.index,
            "step_num": step.step_num,
            "start_time_s": step.start,
            "end_time_s": end,
            "duration_s": duration,
            "compiled": compile_s > 0,
            "compile_s": compile_s,
            "traced": step.traced,
            "instrumented": step.instrumented,
            "interleaved": step.interleaved,
            "source": step.source,
        }
        self.closed += 1
        self.last_duration_s = duration
        self._emit(record)
