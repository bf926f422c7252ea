"""Forked children leave the recording alone.

A script that forks (`os.fork()`, multiprocessing's fork start method, DataLoader workers) copies
the recorder into the child. Only the process that started the recording may write or finalise the
run: a child that ran tpu-perf's end-of-run code would compact the parent's tables under it, write
its own steps into them, and compile the step program again for the analysis. In the child every
live recorder is turned off right after the fork, before any of the child's code runs.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from typing import NoReturn, Protocol


class Forkable(Protocol):
    def detach_after_fork(self) -> None: ...


_live: weakref.WeakSet[Forkable] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False

quiet = threading.Lock()
"""Held by tpu-perf's background threads while they work, and taken before a fork: the child then
never inherits a library lock (file, runtime client, XLA) that one of them held mid-call."""


_held = False


def _before() -> None:
    """Wait (2 s at most: a stuck metric source must not stall the script) for our threads' lull."""
    global _held
    _held = bool(_live) and quiet.acquire(timeout=2.0)


def _in_parent() -> None:
    global _held
    if _held:
        _held = False
        quiet.release()


def _in_child() -> None:
    global quiet, _held
    quiet, _held = threading.Lock(), False
    for obj in list(_live):
        try:
            obj.detach_after_fork()
        except Exception:  # the child must start whatever happens here
            pass


def watch(obj: Forkable) -> None:
    """Call `obj.detach_after_fork()` in every child forked while `obj` lives."""
    global _registered
    with _lock:
        if not _registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before, after_in_parent=_in_parent, after_in_child=_in_child)
            _registered = True
        _live.add(obj)


def unwatch(obj: Forkable) -> None:
    _live.discard(obj)


def end_child(exit_code: int) -> NoReturn:
    """End a forked child whose script ended (`sys.exit` in the child, or its end).

    The child inherits the C++ state of the frameworks (a profiler session, thread pools) but not
    their threads; their static destructors can abort or hang there. Run the script's atexit
    handlers and flush its output as Python would, then leave without the interpreter and C++
    teardown, as multiprocessing's forked workers do.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream: nothing left to flush
            pass
    os._exit(exit_code)
