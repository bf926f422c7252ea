"""The run store: one folder per run, the contract between collectors and analyzers.

Its names are imported when first used (PEP 562): `from tpu_perf.store import layout` or the runs
index must not import pandas, which the readers and the writer need and `ls`/`history` do not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpu_perf.store.manifest import Damage
    from tpu_perf.store.reader import (
        DamagedRunError,
        Run,
        check_run,
        effective_status,
        list_runs,
        load_run,
        read_jsonl,
        scan_runs,
    )
    from tpu_perf.store.writer import RunWriter

_WHERE: dict[str, str] = {
    "Damage": "manifest",
    **dict.fromkeys(("DamagedRunError", "Run", "check_run", "effective_status", "list_runs", "load_run", "read_jsonl", "scan_runs"), "reader"),
    "RunWriter": "writer",
}

__all__ = ["Damage", "DamagedRunError", "Run", "check_run", "scan_runs", "RunWriter", "effective_status", "list_runs", "load_run", "read_jsonl"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
