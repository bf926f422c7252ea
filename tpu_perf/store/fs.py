"""fsspec glue: the store may be a local path or any fsspec URL (`memory://`, `gs://`, ...)."""

from __future__ import annotations

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
