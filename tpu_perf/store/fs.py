"""fsspec glue: the store may be a local path or any fsspec URL (`memory://`, `gs://`, ...)."""

from __future__ import annotations

import errno
import os
import stat
from typing import IO

import fsspec
from fsspec import AbstractFileSystem

from tpu_perf.errors import UsageError

REMOTE_EXTRA = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs"}
"""Protocols the `remote` extra (`pip install 'tpu-perf[remote]'`) brings, with their package."""


def filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem for `url` and the path inside it.

    A URL whose protocol needs a package that is not installed (`s3://` without s3fs) is a usage
    error naming what to install, not an ImportError traceback."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        protocol = url.split("://", 1)[0]
        extra = f"`pip install 'tpu-perf[remote]'` (it adds {REMOTE_EXTRA[protocol]})" if protocol in REMOTE_EXTRA else "install the package it names"
        raise UsageError(f"store {url}: {exc}; {extra}") from None
    except ValueError as exc:  # "Protocol not known: ..."
        raise UsageError(f"store {url}: {exc}; use a folder or an fsspec URL (gs://, s3://, memory://)") from None
    return fs, path.rstrip("/") or path


def is_local(url: str) -> bool:
    fs, _ = filesystem(url)
    return "file" in _protocols(fs)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def to_url(fs: AbstractFileSystem, path: str) -> str:
    """The URL that names `path` on `fs`: plain paths for local files, `proto://path` otherwise."""
    if "file" in _protocols(fs):
        return path
    return fs.unstrip_protocol(path)


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


class NotAFileError(OSError):
    """A store path that is not a regular file (a named pipe, a device, a socket) or is larger than
    its reader's bound: reading it could block forever or fill the memory, so it is not opened."""

    def __str__(self) -> str:
        return str(self.strerror)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


MAX_READ_BYTES = 4 * 2**30
"""The largest store file any reader opens (a step table of millions of steps is a few hundred MB)."""


def open_regular(fs: AbstractFileSystem, path: str, *, limit: int = MAX_READ_BYTES) -> IO[bytes]:
    """`fs.open(path, "rb")` for store reads, which never blocks and never reads without bound:
    a local path is opened non-blocking and must be a regular file (a FIFO named `steps.parquet`
    would otherwise hang every listing) of at most `limit` bytes; else NotAFileError, whose
    `strerror` says what it is. Object stores hold only objects: there the size alone is checked."""
    if "file" in _protocols(fs):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            if not stat.S_ISREG(info.st_mode):
                raise NotAFileError(0, f"is {_kind(info.st_mode)}, not a file; not read", path)
            if info.st_size > limit:
                raise NotAFileError(0, f"is {info.st_size / 2**20:.0f} MiB, larger than the {limit / 2**20:.0f} MiB a reader takes; not read", path)
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
    f = fs.open(path, "rb")
    size = getattr(f, "size", None)
    if isinstance(size, int) and size > limit:
        f.close()
        raise NotAFileError(0, f"is {size / 2**20:.0f} MiB, larger than the {limit / 2**20:.0f} MiB a reader takes; not read", path)
    return f
