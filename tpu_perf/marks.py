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


# -- generation marks: `tpu_perf.request()` / `tpu_perf.token()` for hand-written servers ----------


class GenerationSink(Protocol):
    def request_start(self, source: str, prompt_tokens: int | None, sequences: int) -> None: ...
    def request_end(self) -> None: ...
    def token(self, count: int) -> None: ...
    def warn(self, message: str) -> None: ...


_generation: GenerationSink | None = None


def set_generation_sink(sink: GenerationSink | None) -> None:
    """Called by the recorder when a recording starts and ends (collectors/generation.py)."""
    global _generation
    _generation = sink


class _RequestMark:
    __slots__ = ()

    def __enter__(self) -> _RequestMark:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        sink = _generation
        if sink is not None:
            try:
                sink.request_end()
            except Exception as error:  # noqa: BLE001 - a mark never breaks the script it marks
                sink.warn(f"tpu_perf.request() failed to end a request ({type(error).__name__}: {error}); the request may be missing")


_REQUEST = _RequestMark()


def request(prompt_tokens: int | None = None, sequences: int = 1) -> _RequestMark:
    """Mark the start of a generation request (its prompt is about to be processed): `with
    tpu_perf.request(prompt_tokens=n):` around the request, `tpu_perf.token()` per generated token.
    A bare call ends the thread's previous request where this one starts. `sequences`: prompts
    served together in this call (a batch), each counted as a request."""
    sink = _generation
    if sink is not None:
        try:
            sink.request_start("explicit", _count(prompt_tokens, sink, "request"), _count(sequences, sink, "request") or 1)
        except Exception as error:  # noqa: BLE001 - a mark never breaks the script it marks
            sink.warn(f"tpu_perf.request() failed to mark a request ({type(error).__name__}: {error}); the request may be missing")
    return _REQUEST


def token(count: int = 1) -> None:
    """Mark `count` tokens generated now by the thread's open request (one per sequence of a batch)."""
    sink = _generation
    if sink is not None:
        try:
            sink.token(_count(count, sink, "token") or 1)
        except Exception as error:  # noqa: BLE001 - a mark never breaks the script it marks
            sink.warn(f"tpu_perf.token() failed to mark a token ({type(error).__name__}: {error}); the token may be missing")


def _count(value: object, sink: GenerationSink | None = None, what: str = "") -> int | None:
    """`value` as a non-negative integer (numpy integers too); None when it is none, or (with one
    warning) not such an integer: the mark is still made, that count unknown."""
    if value is None:
        return None
    try:
        number = None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or number < 0:
        if sink is not None:
            sink.warn(f"tpu_perf.{what}({value!r:.40}): a count must be a non-negative integer; the mark is recorded without it")
        return None
    return number
