"""tpu-perf's version, at the bottom of the package: the CLI, the dashboard's cache keys and saved
baselines read it without importing the package root (which sits above them all)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def code_key() -> str:
    """A digest of this installation's own code (every module and data file of the package): what a
    result computed by tpu-perf and saved for later (a run's saved report) must have been computed
    with to be reused. The version alone would keep a report an analyzer fix has changed: in a
    checkout the version does not move with the code."""
    root = Path(__file__).resolve().parent
    digest = hashlib.blake2b(__version__.encode(), digest_size=12)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".toml", ".json") and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape") + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
