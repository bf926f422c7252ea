"""The runs index: one summary row per run, so listing a store of thousands of runs reads a few
Parquet files instead of every run folder.

Safe for concurrent writers on local folders and object stores, because nothing is rewritten in
place and no one writes a file another process writes:
- a run that ends writes its own row in its own folder, `<store>/<run-id>/index.parquet` (a
  temporary name and a rename locally; one PUT on an object store, which is atomic). The store's
  top level keeps only run folders until a reader compacts;
- a reader takes the rows of `<store>/.index/part-*.parquet` and, for runs those lack, each run's
  own row file. When it read more than COMPACT_AT of those (or more than MAX_PARTS parts), it
  writes every row into a new part with a unique name, `part-<time>-<random>.parquet`, and only
  then deletes the parts it read. Two readers compacting at once write two parts with the same
  rows; rows are merged by id (the newest `indexed_at` wins), so a duplicate is harmless and the
  next compaction drops it. A reader that loses a part it listed (another reader merged and
  deleted it) lists again.

Runs with no row (recorded before the index existed, crashed before they could write one, imported,
recorded through the Python API) are summarised on read by the caller's `summarize` and their row
file written then, once they are final; a `running` run's row is computed each time and never
written. Rows of folders that are gone are dropped. The store layer does not analyse: `summarize`
comes from `tpu_perf.analyzers.index_row`.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tpu_perf.errors import DataError, RunNotFoundError, UsageError
from tpu_perf.store import layout
from tpu_perf.store.fs import filesystem, is_local, join, open_regular
from tpu_perf.text import printable

if TYPE_CHECKING:
    from tpu_perf.store.reader import Run

INDEX_DIR = ".index"
ROW_FILE = "index.parquet"
"""A run's own row, in its folder."""
COMPACT_AT = 16
"""Run row files a reader reads before it compacts every row into one part."""
MAX_PARTS = 4

SCHEMA = pa.schema(
    [
        ("id", pa.string()), ("name", pa.string()), ("status", pa.string()),
        ("started_at", pa.float64()), ("ended_at", pa.float64()), ("tags", pa.string()),
        ("chip", pa.string()), ("chip_count", pa.int64()), ("framework", pa.string()), ("script", pa.string()),
        ("processes", pa.int64()), ("fingerprint", pa.string()), ("fingerprint_key", pa.string()),
        ("steps", pa.int64()), ("step_s", pa.float64()), ("step_basis", pa.string()), ("all_in_s", pa.float64()), ("mfu", pa.float64()),
        ("tokens_per_s", pa.float64()), ("peak_memory_bytes", pa.int64()), ("compiles_after_warmup", pa.int64()),
        ("peak_memory_source", pa.string()), ("program_hash", pa.string()),
        ("ttft_p99_s", pa.float64()), ("tpot_p50_s", pa.float64()), ("generated_tokens_per_s", pa.float64()), ("mbu", pa.float64()),
        ("cpu_step_s", pa.float64()),
        ("error", pa.string()), ("index_version", pa.int64()), ("indexed_at", pa.float64()),
        ("files_stamp", pa.string()),
    ]
)
"""One row per run. `tags` and `fingerprint` are JSON objects; `status` is the run's effective
status, or `damaged` (with `error`) for a run that cannot be read or analysed; `files_stamp` is
`folder_stamp` of the run's folder when the row was built (a row whose folder changed since is rebuilt)."""

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)

Summarize = Callable[["Run"], dict[str, Any]]
Damaged = Callable[[str, str], dict[str, Any]]


def _cell(value: Any) -> Any:
    """A string cell as Parquet can hold it: a lone surrogate (a folder name of undecodable bytes,
    quoted in a damage message) is written escaped (`tpu_perf.text`), never a failed index."""
    return printable(value, multiline=True) if isinstance(value, str) else value


def _to_bytes(rows: list[dict[str, Any]]) -> bytes:
    table = pa.Table.from_pylist([{c: _cell(r.get(c)) for c in COLUMNS} for r in rows], schema=SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _put(fs: Any, path: str, data: bytes, *, local: bool) -> None:
    """Whole-file write: temporary name + rename locally (readers skip dot names), one PUT remotely."""
    if local:
        from pathlib import Path

        from tpu_perf.store.writer import write_atomic

        write_atomic(Path(path), data)
    else:
        fs.pipe_file(path, data)


def write_row(store: str, row: dict[str, Any]) -> str:
    """Write one run's row into its folder, `<store>/<id>/index.parquet`; returns the file's path.
    A row without `files_stamp` gets the folder's stamp now (the caller just read the run)."""
    fs, base = filesystem(store)
    folder = join(base, str(row["id"]))
    stamp = row["files_stamp"] if "files_stamp" in row else folder_stamp(fs, folder)
    path = join(folder, ROW_FILE)
    _put(fs, path, _to_bytes([{**row, "files_stamp": stamp, "indexed_at": time.time()}]), local=is_local(store))
    return path


STAMPED_DIRS = frozenset({layout.HOSTS_DIR, layout.HLO_DIR, layout.AOT_DIR})
"""Folders of a run whose files a row depends on (a job's shards, the step program); the rest
(the trace window) count by their folder's own entry."""


def folder_stamp(fs: Any, folder: str) -> str | None:
    """A digest of the name, size and modification time of every file a run's row is made from
    (its own row file and dot names aside): a row stamped otherwise is stale (a table rewritten
    after the run ended) and is rebuilt. None for an object store, where it would cost a listing
    per run (there rows are trusted, and rebuilt by deleting `.index/`), or a folder that cannot
    be listed."""
    if not is_local(folder):
        return None
    entries: list[str] = []

    def scan(path: str, prefix: str, depth: int) -> None:
        with os.scandir(path) as found:
            for entry in found:
                if entry.name.startswith(".") or (not prefix and entry.name == ROW_FILE):
                    continue
                info = entry.stat(follow_symlinks=False)
                entries.append(f"{prefix}{entry.name}\0{info.st_size}\0{info.st_mtime_ns}")
                if depth < 3 and entry.is_dir(follow_symlinks=False) and (prefix or entry.name in STAMPED_DIRS):
                    scan(entry.path, f"{prefix}{entry.name}/", depth + 1)

    try:
        scan(folder, "", 0)
    except OSError:
        return None
    return hashlib.blake2b("\n".join(sorted(entries)).encode("utf-8", "surrogateescape"), digest_size=12).hexdigest()


def known_rows(store: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The rows the index holds for `run_ids` (compacted, else each run's own row file), without
    building any: for a page that analyses the others itself."""
    fs, base = filesystem(store)
    rows, _, _ = read_rows(store)
    found = {run_id: rows[run_id] for run_id in run_ids if run_id in rows}
    for run_id in run_ids:
        if run_id not in found:
            row = _read_row_file(fs, join(base, run_id))
            if row is not None:
                found[run_id] = row
    return found


def _read_row_file(fs: Any, folder: str) -> dict[str, Any] | None:
    """A run folder's own row, None when it has none, it cannot be read, or it is another run's (a
    folder copied under a new name carries the original's row file): then it is rebuilt."""
    try:
        rows = _read_files(fs, [join(folder, ROW_FILE)])
    except (OSError, pa.ArrowException, ValueError, KeyError):
        return None
    return rows[0] if rows and rows[0].get("id") == folder.rstrip("/").rsplit("/", 1)[-1] else None


def _index_files(fs: Any, base: str) -> list[str]:
    folder = join(base, INDEX_DIR)
    fs.invalidate_cache(folder)  # object stores' clients cache listings; runs end in other processes
    try:
        names = fs.ls(folder, detail=False)
    except FileNotFoundError:
        return []
    return sorted(p for p in names if p.rsplit("/", 1)[-1].startswith("part-") and p.endswith(".parquet"))


def _read_files(fs: Any, files: list[str]) -> list[dict[str, Any]]:
    tables = []
    for path in files:
        with open_regular(fs, path) as f:
            table = pq.ParquetFile(f, pre_buffer=False).read(use_threads=False)
        for name in COLUMNS:  # a part written before a column existed: null there
            if name not in table.column_names:
                table = table.append_column(SCHEMA.field(name), pa.nulls(table.num_rows, SCHEMA.field(name).type))
        if table.column("id").type != pa.string():
            raise ValueError("its id column is not text")
        tables.append(table.select(list(COLUMNS)))
    if not tables:
        return []
    return pa.concat_tables(tables, promote_options="permissive").to_pylist()


def read_rows(store: str) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """The compacted rows by id (newest `indexed_at` per id), the parts they came from, and the
    parts that could not be read (garbage, torn, not files): skipped, for a compaction to replace."""
    fs, base = filesystem(store)
    if fs.exists(base) and not fs.isdir(base):
        raise UsageError(f"--store {store}: is a file, not a folder; give the folder that holds the runs")
    for _attempt in range(5):
        try:
            files = _index_files(fs, base)
        except FileNotFoundError:
            continue
        except PermissionError:  # another user's index: a cache, so rows come from the run folders
            return {}, [], []
        except OSError as exc:
            raise DataError(f"{join(base, INDEX_DIR)}: the runs index cannot be listed ({type(exc).__name__}: {exc}); delete the folder to rebuild it") from None
        rows, lost, damaged = [], False, []
        for path in files:
            try:
                rows.extend(_read_files(fs, [path]))
            except FileNotFoundError:  # merged and deleted by a compacting reader: list again
                lost = True
                break
            except PermissionError:
                continue
            except (OSError, pa.ArrowException, ValueError, KeyError, TypeError):  # a damaged part is a cache miss: its runs' rows are built again, and the next compaction replaces it
                damaged.append(path)
                continue
        if lost:
            continue
        merged: dict[str, dict[str, Any]] = {}
        for row in rows:
            old = merged.get(row["id"])
            if old is None or (row["indexed_at"] or 0) >= (old["indexed_at"] or 0):
                merged[row["id"]] = row
        return merged, files, damaged
    raise DataError(f"{join(base, INDEX_DIR)}: the runs index kept changing while it was read; try again")


def _store_ids(fs: Any, base: str) -> dict[str, str]:
    """Folder name -> path of every entry in the store that may be a run (not dot names)."""
    fs.invalidate_cache(base)
    try:
        names = fs.ls(base, detail=False)
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        raise UsageError(f"--store {base}: lies under a file, not a folder; give the folder that holds the runs") from None
    except PermissionError:
        raise DataError(f"{base}: the store folder is not readable by this user; ask its owner to `chmod a+rx` it (docs/store.md: permissions)") from None
    found = {}
    for path in names:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name and not name.startswith("."):
            found[name] = path
    return found


def compact(store: str, rows: list[dict[str, Any]], merged_files: list[str]) -> None:
    """Write `rows` as one new part, then delete the parts `merged_files` (whose rows it holds)."""
    fs, base = filesystem(store)
    name = f"part-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}.parquet"
    _put(fs, join(base, INDEX_DIR, name), _to_bytes(rows), local=is_local(store))
    for path in merged_files:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass  # another reader merged it too
        except OSError:
            continue  # not removable here (a damaged part that is a folder, another user's file): read past again


def _usable(row: dict[str, Any] | None, version: int, run_id: str, stamp: str | None) -> bool:
    """A stored row stands for the folder `run_id` when it is of this version, final, its own (a
    folder copied under another name carries the original's row file: rebuilt) and made from the
    files the folder holds now (`folder_stamp`; unchecked where that is None)."""
    return (
        row is not None and row.get("id") == run_id and (row.get("index_version") or 0) >= version
        and row.get("status") in layout.FINAL_STATUSES and (stamp is None or row.get("files_stamp") == stamp)
    )


def runs_index(store: str, *, summarize: Summarize, damaged: Damaged, version: int) -> list[dict[str, Any]]:
    """Every run of `store` as its index row, oldest first: from the compacted parts, else the run's
    own row file, else built with `summarize` (and its row file written once the run is final);
    compacted when many rows came from row files."""
    fs, base = filesystem(store)
    stored, parts, damaged_parts = read_rows(store)
    present = _store_ids(fs, base)
    rows: list[dict[str, Any]] = []
    fresh = 0
    for run_id, path in present.items():
        stamp = folder_stamp(fs, path)
        row = stored.get(run_id)
        if _usable(row, version, run_id, stamp):
            rows.append(row)  # type: ignore[arg-type]
            continue
        row = _read_row_file(fs, path)
        if not _usable(row, version, run_id, stamp):
            row = _summarize_folder(fs, path, run_id, summarize, damaged)
            if row is None:
                continue
            row["files_stamp"] = stamp  # taken before the run was read: a change meanwhile rebuilds it next time
            if row["status"] in layout.FINAL_STATUSES:
                try:
                    write_row(store, row)
                except OSError:
                    pass  # a read-only store is listed all the same; the row is built again next time
        rows.append(row)  # type: ignore[arg-type]
        fresh += row["status"] in layout.FINAL_STATUSES  # type: ignore[index]
    if fresh > COMPACT_AT or len(parts) > MAX_PARTS or damaged_parts:
        final = [r for r in rows if r["status"] in layout.FINAL_STATUSES]
        try:  # only the parts this reader read: a part another reader writes meanwhile stays
            compact(store, final, parts)
        except OSError:
            pass
    rows.sort(key=lambda r: (r.get("started_at") or 0, r["id"]))
    return rows


def _summarize_folder(fs: Any, path: str, run_id: str, summarize: Summarize, damaged: Damaged) -> dict[str, Any] | None:
    """The row of the run folder at `path`; None when it is not a run folder."""
    from tpu_perf.store.reader import _open_checked, _open_run  # pandas: only when a row is built

    try:
        if not fs.exists(join(path, layout.MANIFEST)):
            return None
        run = _open_checked(fs, path) if is_local(path) else _open_run(fs, path)  # robust-store's check: tables' footers too where that is cheap
    except RunNotFoundError:
        return None
    except Exception as exc:  # a damaged manifest is a damaged run, listed as such
        return damaged(run_id, f"{type(exc).__name__}: {exc}" if not isinstance(exc, DataError) else str(exc))
    try:
        return summarize(run)
    except Exception as exc:
        return damaged(run_id, f"{type(exc).__name__}: {exc}")
