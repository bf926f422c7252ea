"""`tpu_perf.record()`: record a block of code (a notebook cell, a function) into a run.

The same collectors and options as `tpu-perf record SCRIPT` (`commands/options.py`'s `record_options` checks them),
started in this process when the block begins and finalised when it ends. What a notebook made in
earlier cells is hooked too: optimizer hooks are global, and functions jitted before the block are
bound to tracked wrappers for its length (`collectors/jax/existing.py`).

    with tpu_perf.record(name="baseline", store="runs") as run:
        for batch in batches:
            state, loss = train_step(state, batch)
    run.report()
"""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from tpu_perf.notebook.handle import RunHandle
from tpu_perf.store import layout

_active: Recording | None = None
"""The recording in progress in this process: recordings do not nest (one set of hooks)."""


class Recording:
    """A context manager (and decorator) that records what runs inside it; see `record()`."""

    def __init__(self, name: str | None, store: str | None, tags: dict[str, str] | list[str] | None, options: dict[str, Any], *, command: str = "tpu_perf.record()") -> None:
        from tpu_perf.commands.options import parse_tags, record_options

        self.name = name
        self.store = str(store) if store is not None else layout.default_store()  # TPU_PERF_STORE, as the CLI
        self.tags = parse_tags(tags) if isinstance(tags, list) else dict(tags or {})
        unknown = sorted(set(options) - set(inspect.signature(record_options).parameters))
        if unknown:
            from tpu_perf.errors import UsageError

            known = ", ".join(p for p in inspect.signature(record_options).parameters if p != "store")
            raise UsageError(f"tpu_perf.record: unknown option {', '.join(unknown)}; the options are the record command's: {known}")
        self.options = record_options(self.store, **options)  # checked now: a typo fails before the block runs
        self._raw = (name, store, tags, options)
        self.command = command
        self.namespaces: list[dict[str, Any]] = []
        self.handle: RunHandle | None = None
        self._started: tuple[Any, Any, list[Callable[[], None]]] | None = None
        self._undos: list[Callable[[], None]] = []

    # -- context manager --------------------------------------------------------------------------
    def __enter__(self) -> RunHandle:
        caller = inspect.currentframe()
        caller = caller.f_back if caller is not None else None
        if caller is not None and not self.namespaces:
            self.namespaces = [caller.f_globals]
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        self.stop(_outcome(kind, exc, tb))
        return False  # an exception propagates unchanged

    # -- decorator --------------------------------------------------------------------------------
    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        name, store, tags, options = self._raw

        @functools.wraps(func)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            again = Recording(name or func.__name__, store, tags, options, command=f"{func.__qualname__}()")
            again.namespaces = [func.__globals__, {"function": func}]  # its globals, and its closure's cells
            with again:
                return func(*args, **kwargs)

        return recorded

    # -- the recording ----------------------------------------------------------------------------
    def start(self) -> RunHandle:
        global _active
        from tpu_perf.collectors.record import base_manifest, start_recording
        from tpu_perf.errors import UsageError
        from tpu_perf.store.writable import check_writable_store

        if _active is not None:
            raise UsageError(f"a recording is already running in this process (run {_active.handle.id if _active.handle else '?'}); recordings do not nest")
        check_writable_store(self.store)
        manifest = base_manifest(self.options, name=self.name or "notebook", tags=self.tags, command=[self.command], script=None, module=None, source=Path.cwd())
        manifest["notebook"] = True
        writer, rec, uninstalls = start_recording(manifest, store=self.store, options=self.options, log=_log)
        self._started = (writer, rec, uninstalls)
        _active = self
        for adopt in rec.adopters:
            try:
                self._undos.append(adopt(self.namespaces))
            except Exception as exc:  # a namespace we cannot walk: steps of functions jitted inside the block are still found
                rec.warn(f"functions jitted before the recording could not be hooked ({type(exc).__name__}: {exc}); jit them inside the block, or mark steps with tpu_perf.step()")
        self.handle = RunHandle(writer.run_id, writer.url, self.store)
        _log(f"tpu-perf: recording run {writer.run_id} into {writer.url}")
        return self.handle

    def stop(self, outcome: Any) -> None:
        global _active
        from tpu_perf.collectors.record import finish_recording

        if self._started is None:
            return
        writer, rec, uninstalls = self._started
        self._started = None
        try:
            finish_recording(writer, rec, outcome, [*uninstalls, *self._undos])
        finally:
            _active = None
        if self.handle is not None:
            _log(self.handle.summary_line())


def record(name: str | None = None, store: str | Path | None = None, *, tags: dict[str, str] | list[str] | None = None, **options: Any) -> Recording:
    """Record the block (or each call of the decorated function) into a run of `store`.

    `options` are the `tpu-perf record` command's (`trace_steps=(3, 6)` or None, `chip`, `model`,
    `tokens_per_step`, `batch_size`, `topology`, `quiet`, ...). The `with` statement gives a
    `RunHandle` (`.id`, `.folder`, `.report()`, `.advise()`). Leaving the block finalises the run;
    an exception inside it marks the run failed and propagates unchanged; a process that dies
    inside it leaves a run that loads as `crashed`.
    """
    return Recording(name, None if store is None else str(store), tags, options)


def _outcome(kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Any:
    from tpu_perf.collectors.runner import Outcome

    if exc is None or kind is None:
        return Outcome("completed", 0)
    text = "".join(traceback.format_exception(kind, exc, tb))
    if issubclass(kind, KeyboardInterrupt):
        return Outcome("interrupted", 130, text, "KeyboardInterrupt")
    return Outcome("failed", 1, text, f"{kind.__name__}: {exc}")


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
