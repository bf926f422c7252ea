"""fsspec glue: the store may be a local path or any fsspec URL (`memory://`, `gs://`, ...)."""

from __future__ import annotations

import fsspec
from fsspec import AbstractFileSystem


def filesystem(url: str) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem for `url` and the path inside it."""
    fs, path = fsspec.core.url_to_fs(url)
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
