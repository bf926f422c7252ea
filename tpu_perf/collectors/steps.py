"""Turns step marks from several sources into step records.

Sources rank by how much they know (`tpu_perf.store.layout.STEP_SOURCE_RANK`): an explicit
`tpu_perf.step()` beats a framework annotation (`jax.profiler.StepTraceAnnotation`,
`torch.profiler` `prof.step()`), which beats automatic detection (the jitted step function,
optimizer hooks). Once a better source speaks, worse ones are ignored and counting restarts.

Two kinds of marks arrive:
- boundaries (`boundary`, `end`): a step runs from one mark to the next, taken after a device sync;
- spans (`span`): a complete step whose start and device-completion times are already known.

Steps tile the loop: a closed step is held until the next one starts, and ends there, so its
`duration_s` is the wall-clock iteration (what throughput and every published MFU divide by),
whatever the script did between its calls: input work, `float(loss)`, logging. What the step's own
mark measured (dispatch to outputs ready, or the device work the collectors reported inside it)
is kept beside it as `device_s`. A step no successor ended (the last one) ends at its own end and
is marked `tail`: it lacks the host work after it, so the statistics leave it out.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_perf.collectors.core_wait import core_wait
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
    core_wait: tuple[int, float] | None = None
    """`core_wait()` of the thread that opened the step, as it opened it (boundary marks only: a span
    is marked after the fact, from any thread)."""
    cpu: float | None = None
    """The process's CPU time (`time.process_time()`, every thread) as the step started: read by the
    thread that started it (a boundary mark) or at its dispatch (a span's `cpu`); None: not read."""


@dataclass
class _ClosedStep:
    """A step whose own end is known, waiting for the next step's start to end its iteration."""

    step: _OpenStep
    end: float
    device_s: float | None
    busy: bool = False
    """The device time is the reported device work inside the iteration, counted when it is written."""
    ready: float | None = None
    """When the step's outputs were seen ready (span marks stamped exactly); None otherwise."""


MAX_CALLS_HELD = 200_000
"""Call intervals kept while no step takes them (before the step function is known): a few MB."""


class StepTracker:
    """Opens and closes steps; writes one record per closed step through `emit`."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], compile_seconds: Callable[[float, float], float]) -> None:
        self._emit = emit
        self._compile_seconds = compile_seconds
        self._lock = threading.RLock()
        self._open: _OpenStep | None = None
        self._closed: _ClosedStep | None = None
        self._busy: list[tuple[float, float]] = []
        """Device work (dispatch, outputs ready) that collectors reported, for boundary steps' `device_s`."""
        self._busy_seen = False
        self._waits: list[tuple[float, float]] = []
        """Intervals the loop spent blocked in a framework call (a device sync, a collective,
        backward()), for each step's `wait_s`: the rest of its iteration is this process's own work."""
        self._waits_seen = False
        self._calls: list[tuple[float, float]] = []
        """Intervals the loop spent inside calls of jitted functions (dispatch, argument handling,
        framework wrappers), for each step's `call_s` and `loop_s`."""
        self._calls_seen = False
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
            self._flush_closed()  # the worse source's last step ends at its own end
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

    def open(self, source: str, start: float, step_num: int | None = None, *, waited: tuple[int, float] | None = None, cpu: float | None = None) -> None:
        """Open a step at `start`; `waited` and `cpu`: `core_wait()` and `time.process_time()` read at
        `start`, where the caller took `start` earlier (else they are read now, on the calling thread: the loop's)."""
        with self._lock:
            if self._source != source:
                return
            self._begin(_OpenStep(self._next_index, start, source, step_num, self.traced(), self._instrument_next, core_wait=waited or core_wait(),
                                  cpu=time.process_time() if cpu is None else cpu))
            self._instrument_next = False

    def end(self, source: str, now: float) -> None:
        """Close the open step (a `with` block exited) without opening another."""
        with self._lock:
            if self._source is not None and source_rank(source) == source_rank(self._source):
                self._close(now)

    def close_open(self, now: float) -> None:
        """End of the recording: close the open step and write the last one with its own end."""
        with self._lock:
            self._close(now)
            self._flush_closed()

    def device_busy(self, start: float, end: float) -> None:
        """Device work from `start` (dispatch) to `end` (outputs ready), for boundary steps' `device_s`."""
        with self._lock:
            self._busy_seen = True
            _add(self._busy, start, end)

    def waited(self, start: float, end: float) -> None:
        """The loop was blocked from `start` to `end` waiting for the device or other processes."""
        with self._lock:
            self._waits_seen = True
            if end > start:
                _add(self._waits, start, end)

    def called(self, start: float, end: float) -> None:
        """The loop was inside a call of a jitted function from `start` to `end`."""
        with self._lock:
            self._calls_seen = True
            if end > start:
                _add(self._calls, start, end)
            if len(self._calls) > MAX_CALLS_HELD:  # no step opened for a long while (no step source yet): keep the latest
                del self._calls[: MAX_CALLS_HELD // 2]

    def mark_instrumented(self) -> None:
        """Mark the open step; from a boundary hook (no step open yet), the step about to open."""
        with self._lock:
            if self._open is not None:
                self._open.instrumented = True
            else:
                self._instrument_next = True

    def mark_current_instrumented(self) -> None:
        """Mark the step whose iteration is under way: the open one, else the one held for its end."""
        with self._lock:
            if self._open is not None:
                self._open.instrumented = True
            elif self._closed is not None:
                self._closed.step.instrumented = True

    def mark_interleaved(self) -> None:
        """The open step also ran an eval or a checkpoint: a long iteration for a known reason."""
        with self._lock:
            if self._open is not None:
                self._open.interleaved = True
            elif self._closed is not None:  # between a span's end and the next start: its iteration
                self._closed.step.interleaved = True

    def discard_open(self) -> None:
        """Drop the open step unwritten: the time after the last detected step is no step."""
        with self._lock:
            self._open = None

    # -- span marks -------------------------------------------------------------------------------
    def span(self, source: str, start: float, end: float, *, traced: bool = False, step_num: int | None = None, device_known: bool = True, interleaved: bool = False, busy: bool = False, instrumented: bool = False, cpu: float | None = None) -> None:
        """A complete step [start, end]: dispatch to device completion (its `device_s`, when
        `device_known`; else unknown; `end` is the step's `ready_time_s` when known). The step's iteration ends where the next one starts.
        `cpu`: the process's CPU time read at the step's dispatch (its `cpu_s` runs to the next step's); None: unknown.
        `interleaved`: an eval ran since the previous dispatch, so in the previous step's iteration.
        `busy`: `device_s` is the device work reported (`device_busy`) inside the step's iteration,
        counted when the next step starts: with steps queued ahead, dispatch-to-ready overstates it."""
        with self._lock:
            if not self._switch(source):
                return
            if interleaved and self._closed is not None:  # it ran before this dispatch: in the held step's iteration
                self._closed.step.interleaved = True
            self._begin(_OpenStep(self._next_index, start, source, step_num, traced, instrumented, cpu=cpu))
            self._close(end, device_s=max(0.0, end - start) if device_known else None, from_reports=False, busy=busy)
            if self._closed is not None and device_known:
                self._closed.ready = end

    def _begin(self, step: _OpenStep) -> None:
        """Open `step`; the step held before it ends where this one starts."""
        if self._closed is not None:
            self._write(self._closed, step.start, core_wait_now=step.core_wait, cpu_now=step.cpu)
            self._closed = None
        for held in (self._busy, self._waits, self._calls):  # what ended before this step is in no later one
            _drop_until(held, step.start)
        self._open = step
        self._next_index += 1

    def _close(self, end: float, *, device_s: float | None = None, from_reports: bool = True, busy: bool = False) -> None:
        """`from_reports`: the device time is the reported device work inside the step; else
        `device_s` as given (None: unknown)."""
        step = self._open
        if step is None:
            return
        self._open = None
        if self._closed is not None:  # two closes with no start between: the earlier one is done
            self._write(self._closed, self._closed.end, tail=True)
        if from_reports:
            device_s = self._device_seconds(step.start, end)
        self._closed = _ClosedStep(step, end, device_s, busy)

    def _flush_closed(self) -> None:
        """Write the held step with its own end: no next step came to end its iteration."""
        if self._closed is not None:
            self._write(self._closed, self._closed.end, tail=True)
            self._closed = None

    def _device_seconds(self, start: float, end: float) -> float | None:
        """Seconds in [start, end] covered by reported device work; None when none was ever reported."""
        if not self._busy_seen:
            return None
        covered = _covered(_overlapping(self._busy, start, end), start, end)
        _drop_until(self._busy, end)
        return covered

    def _wait_seconds(self, start: float, end: float) -> float | None:
        """Seconds in [start, end] the loop was blocked; None when no blocking call was ever seen."""
        if not self._waits_seen:
            return None
        covered = _covered(_overlapping(self._waits, start, end), start, end)
        _drop_until(self._waits, end)
        return covered

    def _loop_seconds(self, start: float, end: float) -> tuple[float | None, float | None]:
        """Seconds of [start, end] inside jitted calls, and the loop's own host time: neither in a
        call nor blocked (input, augmentation, logging); both None when no call was ever seen."""
        if not self._calls_seen:
            return None, None
        calls = _overlapping(self._calls, start, end)
        inside = _covered(calls, start, end)
        busy = _covered(sorted(calls + _overlapping(self._waits, start, end)), start, end)
        _drop_until(self._calls, end)
        return inside, max(0.0, end - start - busy)

    def _write(self, closed: _ClosedStep, end: float, *, tail: bool = False, core_wait_now: tuple[int, float] | None = None, cpu_now: float | None = None) -> None:
        """`core_wait_now`: the next step's `core_wait` as it opened, where its start ends this
        iteration; the step's `core_wait_s` is the difference when one thread opened both. `cpu_now`:
        the next step's `cpu`; the step's `cpu_s` is the process's CPU time over its iteration (a
        timing that a busy neighbour on a shared CPU runner stretches far less than the wall time:
        docs/ci.md, "Timing on a shared CPU"); None for the last step and where either is unknown."""
        step = closed.step
        end = max(end, step.start)
        duration = end - step.start
        compile_s = self._compile_seconds(step.start, end)
        call_s, loop_s = self._loop_seconds(step.start, end)
        record = {
            "step": step.index,
            "step_num": step.step_num,
            "start_time_s": step.start,
            "end_time_s": end,
            "duration_s": duration,
            "device_s": self._device_seconds(step.start, end) if closed.busy else closed.device_s,
            "ready_time_s": closed.ready,
            "wait_s": self._wait_seconds(step.start, end),
            "call_s": call_s,
            "loop_s": loop_s,
            "core_wait_s": _core_wait_seconds(step.core_wait, core_wait_now),
            "cpu_s": max(0.0, cpu_now - step.cpu) if cpu_now is not None and step.cpu is not None else None,
            "compiled": compile_s > 0,
            "compile_s": compile_s,
            "traced": step.traced,
            "instrumented": step.instrumented,
            "tail": tail,
            "interleaved": step.interleaved,
            "source": step.source,
        }
        self.closed += 1
        self.last_duration_s = duration
        self._emit(record)


def _core_wait_seconds(begin: tuple[int, float] | None, end: tuple[int, float] | None) -> float | None:
    """Seconds the loop's thread waited for a core between two step starts it marked; None unless
    the same thread marked both (the steps' thread, read by `core_wait`)."""
    if begin is None or end is None or begin[0] != end[0]:
        return None
    return max(0.0, end[1] - begin[1])


def _add(intervals: list[tuple[float, float]], lo: float, hi: float) -> None:
    """Add [lo, hi] to sorted, disjoint `intervals`, merged with those it overlaps. A host that queues
    steps ahead reports busy intervals that all overlap (each from a dispatch to outputs ready far
    later): merged, the list stays a few entries long, where a list of every interval made each step's
    bookkeeping O(steps in flight) and slowed a recorded run-ahead loop (1.7 ms a step at 1000 in flight)."""
    if not intervals or lo > intervals[-1][1]:
        intervals.append((lo, hi))
    elif lo >= intervals[-1][0]:
        intervals[-1] = (intervals[-1][0], max(hi, intervals[-1][1]))
    else:  # out of order (a donated call's interval, reported late): merge the whole list once
        merged: list[tuple[float, float]] = []
        for a, b in sorted([*intervals, (lo, hi)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        intervals[:] = merged


def _overlapping(intervals: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The sorted, disjoint `intervals` that overlap [start, end] (found by bisection: a queue of steps
    in flight holds many, and every step's bookkeeping once walked them all)."""
    return intervals[_first_ending_after(intervals, start):bisect.bisect_left(intervals, (end, -math.inf))]


def _first_ending_after(intervals: list[tuple[float, float]], t: float) -> int:
    """Index of the first of the sorted, disjoint `intervals` that ends after `t`. Bisected on the
    tuples themselves (a `key=` bisection calls a Python function per probe: most of the flusher's
    work per step): all before the first starting after `t` end by `t`, but perhaps the last of them."""
    i = bisect.bisect_right(intervals, (t, math.inf))
    return i - 1 if i and intervals[i - 1][1] > t else i


def _covered(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] inside the union of `intervals` (sorted by start)."""
    covered, reach = 0.0, start
    for lo, hi in intervals:
        lo, hi = max(lo, reach), min(hi, end)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return covered


def _drop_until(intervals: list[tuple[float, float]], t: float) -> None:
    """Drop the sorted, disjoint intervals that end by `t` (no later step can hold them)."""
    del intervals[: _first_ending_after(intervals, t)]
