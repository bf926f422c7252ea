"""fsspec glue: the store may be a local path or any fsspec URL (`memory://`, `gs://`, ...)."""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
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
    if "\x00" in url:
        raise UsageError(f"store {url!r}: a path cannot hold a NUL character; give a folder or an fsspec URL")
    try:
        os.fsencode(url)  # a lone surrogate that no file name encodes (argv's undecodable bytes do)
    except UnicodeEncodeError:
        raise UsageError(f"store {url!r}: holds characters no file name or URL can encode") from None
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    if protocol in NETWORK_PROTOCOLS:
        _probe_once(url, protocol)  # bounded: making the client can itself wait on the network (gcsfs)
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        protocol = url.split("://", 1)[0]
        extra = f"`pip install 'tpu-perf[remote]'` (it adds {REMOTE_EXTRA[protocol]})" if protocol in REMOTE_EXTRA else "install the package it names"
        raise UsageError(f"store {url}: {exc}; {extra}") from None
    except ValueError as exc:  # "Protocol not known: ..."
        raise UsageError(f"store {url}: {exc}; use a folder or an fsspec URL (gs://, s3://, memory://)") from None
    return fs, path.rstrip("/") or path


NETWORK_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
"""Object stores reached over the network: each is probed once per process (`_probe_once`)."""

TIMEOUT_ENV = "TPU_PERF_STORE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 15.0
"""How long the first request to a remote store may take before the command says why it failed
(an unreachable endpoint otherwise retries for minutes: gcsfs six times with backoff)."""

_probed: dict[tuple[str, str], str | None] = {}
_probe_lock = threading.Lock()


def store_timeout_s() -> float:
    """TPU_PERF_STORE_TIMEOUT_S, else DEFAULT_TIMEOUT_S; a value that is not a positive number is a usage error."""
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise UsageError(f"{TIMEOUT_ENV}={text!r}: expected seconds, a positive number such as 20")
    return value


def _probe_once(url: str, protocol: str) -> None:
    """Make the client and list the store once per bucket and process, within `store_timeout_s()`:
    a store that cannot be reached (no credentials, no network, no such bucket, no permission) is
    one line naming the store and the cause here, not a traceback (or a "no run" that hides it)
    later. A store that answered is not asked again: one request per process."""
    key = (protocol, url.split("://", 1)[1].split("/", 1)[0])
    with _probe_lock:
        if key in _probed:
            problem = _probed[key]
            if problem:
                raise UsageError(problem)
            return
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            if protocol in ("gs", "gcs") and logging.getLogger("gcsfs").level == logging.NOTSET:
                logging.getLogger("gcsfs").setLevel(logging.ERROR)  # its fallback notes are not the user's business
            fs, path = fsspec.core.url_to_fs(url)
            fs.ls(path.rstrip("/") or path, detail=False)
            outcome.append(None)
        except ImportError:
            outcome.append(None)  # filesystem() says what to install
        except ValueError:
            outcome.append(None)
        except FileNotFoundError as exc:  # a store not written yet is fine; a bucket that does not exist is not
            outcome.append(exc if "bucket" in str(exc).lower() else None)
        except BaseException as exc:  # noqa: BLE001 - classified below
            outcome.append(exc)

    timeout = store_timeout_s()
    thread = threading.Thread(target=probe, name="tpu-perf-store-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    store = f"{protocol}://{key[1]}"
    if not outcome:
        problem = f"store {url}: no answer from {store} within {timeout:g} s (no network, or the endpoint is unreachable); set {TIMEOUT_ENV} to wait longer"
    else:
        problem = None if outcome[0] is None else f"store {url}: {remote_problem(outcome[0], store)}"
    with _probe_lock:
        _probed[key] = problem
    if problem:
        raise UsageError(problem)


def remote_problem(exc: BaseException, store: str) -> str:
    """Why a remote store refused a request, in words: no credentials, no network, no such
    bucket, no permission; else the error's type and first line."""
    names = {t.__name__ for t in type(exc).__mro__}
    text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    lowered = text.lower()
    if names & {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError", "CredentialRetrievalError"} or "credential" in lowered:
        return f"no credentials for {store} ({text}); set them as your client expects (AWS_ACCESS_KEY_ID..., `gcloud auth application-default login`)"
    if isinstance(exc, FileNotFoundError) or "nosuchbucket" in lowered or "bucket does not exist" in lowered:
        return f"no such bucket: {store} ({text}); check the name"
    if isinstance(exc, PermissionError) or "accessdenied" in lowered.replace(" ", "") or "forbidden" in lowered or "403" in lowered:
        return f"permission denied on {store} ({text}); the credentials in use may not read it"
    if names & {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionError", "ClientConnectorError", "ClientConnectorDNSError", "ServerTimeoutError", "TimeoutError", "gaierror"} or "connect" in lowered or "name or service not known" in lowered:
        return f"no network: {store} cannot be reached ({type(exc).__name__}: {text})"
    return f"{store} cannot be read ({type(exc).__name__}: {text})"


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
