"""Hosts of a multi-host capture read in parallel worker processes, streamed back one at a time.

Parsing is CPU-bound Python, so hosts go to processes (at most one per core, and no more than the
memory budget allows). A worker reads one host's file and writes its four tables as Arrow IPC
files into a scratch folder; the parent reads each host's tables back as it finishes, with names
as dictionary (categorical) columns, so it holds tables, never raw files, and no pickled data.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from tpu_perf.traces.xspace_host import HostTables, read_host

TABLES = ("ops", "timeline", "device_steps", "devices")
_CATEGORICAL = {"timeline": ("lane", "kind", "name"), "ops": ("device", "program", "category", "fusion_kind", "bound", "op_class")}
WORKER_MEMORY_PER_FILE_BYTE = 3.5
"""A worker's peak memory per byte of its host's file: 3.3x measured on a 60 MB replicated v6e
host file (bench/bench_xplane_import.py on it: 198 MB), with margin. With the budget of twice
the capture's size this caps the workers."""


def worker_count(sizes: Sequence[int], cpus: int | None, workers: int | None = None) -> int:
    """Processes for host files of `sizes` bytes: one per host, at most one per core, and few enough
    that the workers' peak (WORKER_MEMORY_PER_FILE_BYTE x the largest files at once) stays within
    twice the capture's size. `workers` overrides the core cap (still at most one per host)."""
    if workers is not None:
        return max(1, min(workers, len(sizes)))
    largest = sorted(sizes, reverse=True)
    by_memory = len(largest)
    while by_memory > 1 and WORKER_MEMORY_PER_FILE_BYTE * sum(largest[:by_memory]) > 2 * sum(largest):
        by_memory -= 1
    return max(1, min(len(largest), cpus or 1, by_memory))


def _write_host(path: str, host: int, out: str) -> str:
    t = read_host(Path(path), host)
    folder = Path(out) / f"h{host}"
    folder.mkdir()
    for name in TABLES:
        df = getattr(t, name)
        for col in _CATEGORICAL.get(name, ()):
            df = df.assign(**{col: df[col].astype("category")})
        df.reset_index(drop=True).to_feather(folder / f"{name}.arrow")
    (folder / "hostname").write_text(t.hostname)
    (folder / "clock_zero").write_text("" if t.clock_zero_s is None else repr(t.clock_zero_s))
    return str(folder)


def _read_host_dir(folder: str) -> HostTables:
    f = Path(folder)
    tables = {name: pd.read_feather(f / f"{name}.arrow") for name in TABLES}
    zero = (f / "clock_zero").read_text()
    return HostTables(**tables, hostname=(f / "hostname").read_text(), clock_zero_s=float(zero) if zero else None)


THREADED = ("jax", "torch", "tensorflow")
"""Frameworks that run threads of their own once imported: forking them can deadlock the child."""


def _context() -> multiprocessing.context.BaseContext:
    """fork where the platform has it and the parent runs no framework threads (workers start in
    ms, with the parent's imports); else forkserver (a clean server process forks the workers), else
    spawn."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and not any(name in sys.modules for name in THREADED):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def read_hosts(paths: Sequence[Path], *, workers: int | None = None) -> Iterator[HostTables]:
    """Each host's tables in file order; in worker processes when there are several hosts and cores."""
    n = worker_count([Path(p).stat().st_size for p in paths], os.cpu_count(), workers)
    if n <= 1 or len(paths) <= 1:
        for h, p in enumerate(paths):
            yield read_host(p, h if len(paths) > 1 else None)
        return
    with tempfile.TemporaryDirectory(prefix="tpu-perf-hosts-") as tmp, ProcessPoolExecutor(n, mp_context=_context()) as pool:
        futures = [pool.submit(_write_host, str(p), h, tmp) for h, p in enumerate(paths)]
        try:
            for fut in futures:
                yield _read_host_dir(fut.result())
        finally:
            for fut in futures:
                fut.cancel()
