"""Step marks a script may add: `tpu_perf.step()`. Without a recording they cost one attribute read.

Scripts need no marks (collectors find steps on their own); a mark wins over every automatic source.
"""

from __future__ import annotations

import operator
from types import TracebackType
from typing import Protocol


class StepSink(Protocol):
    def boundary(self, source: str, step_num: int | None = None) -> None: ...
    def end_step(self, source: str) -> None: ...
    def warn(self, message: str) -> None: ...


_sink: StepSink | None = None


def set_sink(sink: StepSink | None) -> None:
    """Called by the recorder when a recording starts and ends."""
    global _sink
    _sink = sink


class _StepMark:
    __slots__ = ()

    def __enter__(self) -> _StepMark:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        sink = _sink
        if sink is not None:
            try:
                sink.end_step("explicit")
            except Exception as exc:  # noqa: BLE001 - a mark never breaks the script it marks
                sink.warn(f"tpu_perf.step() failed to end a step ({type(exc).__name__}: {exc}); the step may be missing")


_MARK = _StepMark()


def step(step_num: int | None = None) -> _StepMark:
    """Mark the start of a training step. Call it once per step, or use `with tpu_perf.step():`.

    Bare calls end the previous step where the next begins (after its device work finished); the
    `with` form also ends the step when the block exits.
    """
    sink = _sink
    if sink is not None:
        if step_num is not None and type(step_num) is not int:
            step_num = _step_number(sink, step_num)
        try:
            sink.boundary("explicit", step_num)
        except Exception as exc:  # noqa: BLE001 - a mark never breaks the script it marks
            sink.warn(f"tpu_perf.step() failed to mark a step ({type(exc).__name__}: {exc}); the step may be missing")
    return _MARK


def _step_number(sink: StepSink, value: object) -> int | None:
    """`value` as a step number (an int, a numpy integer, an integral float), else None with one
    warning: the step is still marked, only its number is unknown."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            if isinstance(value, float) and value.is_integer():
                return int(value)
    sink.warn(f"tpu_perf.step({value!r:.40}): a step number must be an integer; the step is recorded without its number")
    return None
