"""Step marks a script may add: `tpu_perf.step()`. Without a recording they cost one attribute read.

Scripts need no marks (collectors find steps on their own); a mark wins over every automatic source.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol


class StepSink(Protocol):
    def boundary(self, source: str, step_num: int | None = None) -> None: ...
    def end_step(self, source: str) -> None: ...


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
        if _sink is not None:
            _sink.end_step("explicit")


_MARK = _StepMark()


def step(step_num: int | None = None) -> _StepMark:
    """Mark the start of a training step. Call it once per step, or use `with tpu_perf.step():`.

    Bare calls end the previous step where the next begins (after its device work finished); the
    `with` form also ends the step when the block exits.
    """
    if _sink is not None:
        _sink.boundary("explicit", step_num)
    return _MARK
