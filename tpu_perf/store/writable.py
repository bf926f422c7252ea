"""Checks that a local store can hold runs, before a script starts or a listing says "no runs".

A store that is a file, or sits under a file, or cannot be written, would otherwise end a recording
in a traceback after the script was already set up (or make `ls` claim the store is empty).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from tpu_perf.errors import UsageError
from tpu_perf.store.fs import is_local


def _file_in_path(path: Path) -> Path | None:
    """The first component of `path` (itself included) that exists and is not a folder."""
    for part in (*reversed(path.parents), path):
        if part.exists() and not part.is_dir():
            return part
    return None


def _problem(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the folder is read-only for this user"
    return exc.strerror or type(exc).__name__


def check_readable_store(store: str) -> None:
    """UsageError when the local `store` is a file or lies under one (nothing to list there)."""
    if not is_local(store):
        return
    path = Path(store).expanduser()
    try:
        blocker = _file_in_path(path.absolute())
    except (OSError, ValueError) as exc:  # a name too long, a loop of links
        raise UsageError(f"--store {store}: not a usable folder ({getattr(exc, 'strerror', None) or exc}); give a folder for the run store") from None
    if blocker is not None:
        where = "is a file" if blocker == path.absolute() else f"lies under {blocker}, which is a file"
        raise UsageError(f"--store {store}: {where}, not a folder; give a folder for the run store")


def check_writable_store(store: str) -> None:
    """UsageError unless run folders can be created in the local `store`. Nothing is left behind:
    the probe goes into the store, or the nearest folder above it that exists."""
    check_readable_store(store)
    if not is_local(store):
        return
    path = Path(store).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".tpu-perf-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--store {store}: cannot write run folders there ({_problem(exc)}); give a writable folder") from None
