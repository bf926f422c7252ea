"""The run store: one folder per run, the contract between collectors and analyzers."""

from tpu_perf.store.reader import Run, effective_status, list_runs, load_run, read_jsonl
from tpu_perf.store.writer import RunWriter

__all__ = ["Run", "RunWriter", "effective_status", "list_runs", "load_run", "read_jsonl"]
