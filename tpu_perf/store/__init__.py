"""The run store: one folder per run, the contract between collectors and analyzers."""

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

__all__ = ["Damage", "DamagedRunError", "Run", "check_run", "scan_runs", "RunWriter", "effective_status", "list_runs", "load_run", "read_jsonl"]
