"""How long the calling thread has waited for a CPU core: runnable, but other threads ran.

On a machine shared with other processes (a CI runner, a notebook beside a build, XLA:CPU's own
threads), a loop thread put off its core leaves gaps in its trace with no op running. Eager PyTorch
on a CPU runs its ops on that thread, so the breakdown would read the gaps as the loop's own host
work (measured: a Keras-on-torch loop read 28-31 % of its step as host work beside two busy
processes, 0 % on a quiet machine). Linux counts the time for every thread in its scheduler
statistics (`/proc/thread-self/schedstat`: time on a core, time waiting on a run queue, slices), so
the recorder reads it at each step boundary: one `pread` of an open file, about a microsecond.
"""

from __future__ import annotations

import os
import threading

_local = threading.local()


def _forget_in_child() -> None:
    """A forked child's thread is not the one the inherited file names (/proc/thread-self was the
    parent's thread when opened): open its own on the next read."""
    fd = getattr(_local, "fd", None)
    _local.__dict__.clear()
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def core_wait() -> tuple[int, float] | None:
    """(this thread's id, seconds it has waited for a core since it started); None where the kernel
    gives no scheduler statistics (not Linux, or schedstats off: every field reads 0)."""
    fd = getattr(_local, "fd", None)
    if fd is None:
        if getattr(_local, "off", False):
            return None
        tid = threading.get_native_id()
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            try:
                fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                _local.off = True
                return None
        _local.fd, _local.tid = fd, tid
    try:
        on_core_ns, waited_ns, _ = os.pread(fd, 96, 0).split()
        on_core, waited = int(on_core_ns), int(waited_ns)
    except (OSError, ValueError):
        return None
    if on_core == 0:  # a thread that is running has run: the statistics are off
        return None
    return _local.tid, waited / 1e9
