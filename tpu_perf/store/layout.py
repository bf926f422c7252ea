"""The run folder layout: file names, schema version, statuses and run ids.

Everything that names a file inside a run lives here, so that writers and readers cannot drift.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time

SCHEMA_VERSION = 1
"""Bumped when a file's meaning changes; readers accept this version and every older one."""

MANIFEST = "run.json"
TRACEBACK = "traceback.txt"
HLO_DIR = "hlo"
SIGNATURE_SUFFIX = ".signature.json"
"""Beside a program's HLO (`hlo/<stem>.hlo.txt`): its inputs and outputs by pytree path, shape, dtype and donation."""
TRACE_DIR = "trace"
AOT_DIR = "aot"
HOSTS_DIR = "hosts"
"""A multi-process job's run: `<id>/run.json` describes the job, `<id>/hosts/<shard>/` is one
process's complete run folder (its own run.json and tables), written by that process alone."""
JOB_MANIFEST_FIELDS = ("name", "tags", "command", "script", "module", "cwd", "git", "process_count")
"""What a job's run.json copies from its first process's manifest: what ran, where, how many."""
RUN_ID_ENV = "TPU_PERF_RUN_ID"
"""Set by a launcher: every process recording with it joins that one job run."""
"""One `<topology>.json` per `record --topology` slice: the TPU compiler's cost and memory analyses."""

APPEND_TABLES = ("steps", "compiles", "memory", "runtime", "requests", "tokens")
"""Tables written as append-only JSON lines while the run is live, compacted to Parquet at its end.
A finished run's manifest lists those it wrote under `tables`: one listed there but absent from the
folder reads as missing (an error naming the file), never as an empty table."""

LIST_COLUMNS = {"runtime": ("exec_bucket_counts", "exec_bucket_bounds_us")}
"""A table's columns holding a list per row (libtpu's execution-time histograms). Decoding them is
most of reading such a table, and only a few rows of them are ever used: the analyses that scan
every row read the table without them (`Run.scalar_table`) and take those rows apart (`Run.arrow_column`)."""

STATUSES = ("running", "completed", "failed", "interrupted", "crashed")
FINAL_STATUSES = ("completed", "failed", "interrupted", "crashed")

HEARTBEAT_INTERVAL_S = 5.0
"""How often a live recording rewrites the heartbeat in run.json."""

STALE_HEARTBEAT_S = 120.0
"""A `running` run whose heartbeat is older than this is loaded as `crashed`."""

STEP_SOURCE_RANK = {"explicit": 0, "annotation": 1, "auto": 2}
"""Step sources, best first. Step records carry the full name, e.g. `auto:jit(train_step)`
(`auto:pmap(train_step)` for a pmap step);
readers use the best source present in a run's steps table."""


def source_rank(source: str) -> int:
    return STEP_SOURCE_RANK.get(source.split(":", 1)[0], len(STEP_SOURCE_RANK))


DEFAULT_STORE = "./tpu-perf-runs"
STORE_ENV = "TPU_PERF_STORE"


def default_store() -> str:
    """The store named by TPU_PERF_STORE, else ./tpu-perf-runs."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE


def aot_stem(topology: str) -> str:
    """`v6e:2x2` -> `v6e_2x2`: the file-name form of a TPU slice name."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", topology).strip("_")


def aot_json(topology: str) -> str:
    return f"{AOT_DIR}/{aot_stem(topology)}.json"


def aot_hlo(topology: str) -> str:
    return f"{HLO_DIR}/aot-{aot_stem(topology)}.hlo.txt"


def shard_path(job_id: str, shard: str) -> str:
    """`<job>/hosts/<shard>`: one process's folder inside a job's run, relative to the store."""
    return f"{job_id}/{HOSTS_DIR}/{shard}"


def jsonl_name(table: str) -> str:
    return f"{table}.jsonl"


def parquet_name(table: str) -> str:
    return f"{table}.parquet"


def new_run_id(now: float | None = None) -> str:
    """A sortable, unique id: UTC start time plus 6 random hex digits (`20261129-171530-3fa2c1`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def hostname() -> str:
    return socket.gethostname()
