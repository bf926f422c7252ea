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
from typing import Protocol


class Forkable(Protocol):
    def detach_after_fork(self) -> None: ...


_live: weakref.WeakSet[Forkable] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False


def _in_child() -> None:
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
            os.register_at_fork(after_in_child=_in_child)
            _registered = True
        _live.add(obj)


def unwatch(obj: Forkable) -> None:
    _live.discard(obj)


def end_child(exit_code: int) -> None:
    """End a forked child whose parent had a profiler session open at the fork.

    The child inherits the profiler's C++ state but not its threads; its static destructors then
    abort or hang at exit. Run the script's atexit handlers and flush its output as Python would,
    then leave without the C++ teardown, as multiprocessing's forked workers do.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream: nothing left to flush
            pass
    os._exit(exit_code)
