"""Reads run folders: `load_run()` and `list_runs()`.

A run folder is plain files (JSON manifest, Parquet or JSON-lines tables, HLO text, traces), so it
can also be read by anyone with pandas. These readers add the rules: the effective status of a run
whose recorder died, torn last lines, and one-line errors that name the bad file.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import json
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from tpu_perf.errors import DataError, RunNotFoundError, UsageError
from tpu_perf.store import layout
from tpu_perf.store.fs import NotAFileError, filesystem, is_local, join, open_regular, to_url
from tpu_perf.store.manifest import (
    Damage,
    frame_problem,
    manifest_problem,
    schema_problem,
    values_problem,
)
from tpu_perf.text import printable, printable_tree

T = TypeVar("T")


class DamagedRunError(DataError):
    """A run folder whose manifest or a table fails its schema: one line naming the file and field."""

    def __init__(self, damage: Damage) -> None:
        super().__init__(f"{damage}; the run is damaged (other runs are unaffected)")
        self.damage = damage


class TornLineWarning(UserWarning):
    """A JSON-lines table ended in a partial line (the recorder died mid-write); it was dropped."""


def read_jsonl(source: str | Path | io.IOBase | bytes, *, name: str = "", warn: bool = True) -> pd.DataFrame:
    """Parse JSON lines; a torn *last* line is dropped (with a warning), a bad middle line is an error."""
    if isinstance(source, bytes):
        text = source.decode("utf-8", errors="replace")
    elif isinstance(source, (str, Path)):
        name = name or str(source)
        text = Path(source).read_text(encoding="utf-8", errors="replace")
    else:
        text = source.read().decode("utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            is_last = all(not rest.strip() for rest in lines[i + 1 :])
            if not is_last:
                raise DataError(f"{name}: line {i + 1} is not valid JSON ({exc.msg}); the file is damaged") from None
            if warn:
                warnings.warn(f"{name}: dropped a torn last line (the recorder stopped mid-write)", TornLineWarning, stacklevel=2)
    return pd.DataFrame.from_records(records)


def read_parquet(source: Any, columns: list[str] | None = None) -> pd.DataFrame:
    """One Parquet file as `pd.read_parquet` gives it (same frame, dtypes and attrs), read with
    `pyarrow.parquet.ParquetFile`: a run's tables are single small files, and skipping the dataset
    layer of `pd.read_parquet` (`pq.read_table`) makes reading a store's runs about 20% faster.
    No Arrow thread pool is started (no pre-buffering, no threaded conversion): the files are small,
    and Arrow's pool threads, alive at interpreter exit, sometimes abort the process after its work is
    done ("terminate called without an active exception", exit -6; apache/arrow#34314)."""
    table = pq.ParquetFile(source, pre_buffer=False).read(columns=columns, use_pandas_metadata=True, use_threads=False)
    frame = table.to_pandas(use_threads=False)
    attrs = (table.schema.metadata or {}).get(b"PANDAS_ATTRS")
    if attrs:
        frame.attrs = json.loads(attrs)
    return frame


@dataclass
class Run:
    """One recorded run: its manifest and its tables as pandas DataFrames, loaded on first use."""

    id: str
    url: str
    manifest: dict[str, Any]
    status: str
    """The effective status: a `running` run whose recorder is gone or silent reads `crashed`."""
    _fs: Any = field(repr=False, default=None)
    _path: str = field(repr=False, default="")
    hosts: tuple[Run, ...] = ()
    """A multi-process job's processes, by process index; empty for a single process's run. A job's
    tables and files are those of its first process (`primary`); `hosts` has every process's."""

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.id)

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.manifest.get("tags") or {})

    @property
    def started_at(self) -> float | None:
        return self.manifest.get("started_at")

    @property
    def is_job(self) -> bool:
        return bool(self.manifest.get("job"))

    @property
    def primary(self) -> Run:
        """The process whose tables stand for the job: process 0 when it was recorded."""
        return self.hosts[0] if self.hosts else self

    @cached_property
    def modified_stamp(self) -> float:
        """The newest modification time among the run's files: a cache key that changes with the run.
        Dot names are not the run's (a file being written, the saved report derived from the rest)."""
        if self.hosts:
            return max(host.modified_stamp for host in self.hosts)
        stamps = []
        for info in self._fs.ls(self._path, detail=True):
            if str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1].startswith("."):
                continue
            stamp = info.get("mtime") or info.get("LastModified") or info.get("created")
            if hasattr(stamp, "timestamp"):
                stamp = stamp.timestamp()
            if isinstance(stamp, (int, float)):
                stamps.append(float(stamp))
        return max(stamps, default=0.0)

    def table(self, name: str) -> pd.DataFrame:
        """A table by name (`steps`, `compiles`, `memory`, `programs`, `ops`, ...); empty if absent.

        Read once per loaded Run: a Run is a snapshot, `load_run` again to see new rows."""
        if name not in self._tables:
            self._tables[name] = self._read_table(name)
        return self._tables[name]

    def scalar_table(self, name: str) -> pd.DataFrame:
        """`table(name)` without its list columns (`layout.LIST_COLUMNS`), read once per loaded Run;
        the whole table when it is loaded already. For the analyses that scan every row: they use
        none of the lists, whose decoding is most of reading the table."""
        skip = layout.LIST_COLUMNS.get(name, ())
        if not skip or name in self._tables:
            return self.table(name)
        key = f"{name} without {', '.join(skip)}"
        if key not in self._tables:
            self._tables[key] = self._read_table(name, skip=skip)
        return self._tables[key]

    def arrow_column(self, name: str, column: str) -> pa.ChunkedArray | None:
        """One column of a table as Arrow, read apart and not kept (a list column: its few rows an
        analysis needs are taken from it); None when the table has no such column."""
        parquet = self.file_path(layout.parquet_name(name))
        if name in self._tables or not self._fs.exists(parquet):
            frame = self.table(name)
            return pa.chunked_array([pa.array(frame[column].to_numpy(dtype=object), from_pandas=True)]) if column in frame else None
        try:
            with open_regular(self._fs, parquet) as f:
                file = pq.ParquetFile(f, pre_buffer=False)
                return file.read(columns=[column], use_threads=False).column(column) if column in file.schema_arrow.names else None
        except Exception as exc:  # pyarrow raises many types for damaged files
            raise DamagedRunError(Damage(to_url(self._fs, parquet), f"cannot be read ({type(exc).__name__}: {str(exc)[:200]})")) from None

    def derived(self, key: str, compute: Callable[[Run], T]) -> T:
        """`compute(self)`, once per loaded Run: analyzers keep tables they derive (the steps of
        the best source, sorted) here instead of deriving them again in every section.
        Treat the value as read-only; it is shared by every caller."""
        if key not in self._derived:
            self._derived[key] = compute(self)
        return self._derived[key]

    @cached_property
    def _tables(self) -> dict[str, pd.DataFrame]:
        return {}

    @cached_property
    def _derived(self) -> dict[str, Any]:
        return {}

    @property
    def steps(self) -> pd.DataFrame:
        return self.table("steps")

    @property
    def compiles(self) -> pd.DataFrame:
        return self.table("compiles")

    @property
    def memory(self) -> pd.DataFrame:
        return self.table("memory")

    @property
    def programs(self) -> pd.DataFrame:
        return self.table("programs")

    def file_path(self, relpath: str) -> str:
        return join(self._path, relpath)

    def exists(self, relpath: str) -> bool:
        return bool(self._fs.exists(self.file_path(relpath)))

    def read_text(self, relpath: str) -> str:
        path = self.file_path(relpath)
        try:
            with open_regular(self._fs, path) as f:
                return f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise
        except PermissionError:
            raise DamagedRunError(Damage(to_url(self._fs, path), UNREADABLE)) from None
        except OSError as exc:
            raise DamagedRunError(Damage(to_url(self._fs, path), f"cannot be read ({exc.strerror or type(exc).__name__})")) from None

    def list_files(self, subdir: str) -> list[str]:
        """Paths relative to the run folder of every file below `subdir`."""
        base = self.file_path(subdir)
        if not self._fs.exists(base):
            return []
        prefix = self._path.rstrip("/") + "/"
        return sorted(p[len(prefix) :] if p.startswith(prefix) else p for p in self._fs.find(base))

    def _read_table(self, name: str, skip: tuple[str, ...] = ()) -> pd.DataFrame:
        parquet = self.file_path(layout.parquet_name(name))
        jsonl = self.file_path(layout.jsonl_name(name))
        try:
            if self._fs.exists(parquet):
                with open_regular(self._fs, parquet) as f:
                    file = pq.ParquetFile(f, pre_buffer=False)
                    problem = schema_problem(name, file.schema_arrow)
                    frame = None if problem else read_parquet(f, [c for c in file.schema_arrow.names if c not in skip] if skip else None)
                bad = parquet
            elif self._fs.exists(jsonl):
                with open_regular(self._fs, jsonl) as f:
                    frame = read_jsonl(f.read(), name=to_url(self._fs, jsonl)).drop(columns=list(skip), errors="ignore")
                problem, bad = frame_problem(name, frame), jsonl
            else:
                if name in (self.manifest.get("tables") or ()):
                    raise DamagedRunError(Damage(to_url(self._fs, parquet), MISSING_TABLE))
                return pd.DataFrame()
        except DataError:
            raise
        except PermissionError:
            raise DamagedRunError(Damage(to_url(self._fs, parquet), UNREADABLE)) from None
        except NotAFileError as exc:
            raise DamagedRunError(Damage(to_url(self._fs, exc.filename), exc.strerror)) from None
        except Exception as exc:  # pyarrow raises many types for damaged files
            bad = parquet if self._fs.exists(parquet) else jsonl
            raise DamagedRunError(Damage(to_url(self._fs, bad), f"cannot be read ({type(exc).__name__}: {str(exc)[:200]})")) from None
        problem = problem or values_problem(name, frame)
        if problem:
            raise DamagedRunError(Damage(to_url(self._fs, bad), problem))
        return frame


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def effective_status(manifest: dict[str, Any], now: float | None = None) -> str:
    """`running` only while the recorder is alive: same host and live pid, or a fresh heartbeat."""
    status = str(manifest.get("status", "crashed"))
    if status != "running":
        return status
    now = time.time() if now is None else now
    pid, host = manifest.get("pid"), manifest.get("host")
    if host == layout.hostname() and isinstance(pid, int) and not _pid_alive(pid):
        return "crashed"
    heartbeat = manifest.get("heartbeat_at") or manifest.get("started_at") or 0
    try:
        age = now - float(heartbeat)
    except (TypeError, ValueError):
        return "crashed"
    if not -layout.STALE_HEARTBEAT_S <= age <= layout.STALE_HEARTBEAT_S:  # stale, in the future, or NaN
        return "crashed"
    return "running"


def _read_manifest(fs: Any, path: str) -> dict[str, Any]:
    """The run.json at `path`, decoded once and checked against the schema (`store.manifest`)."""
    manifest_path = join(path, layout.MANIFEST)
    url = to_url(fs, manifest_path)
    try:
        with open_regular(fs, manifest_path) as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise RunNotFoundError(f"{url}: not found; is {to_url(fs, path)} a tpu-perf run folder?") from None
    except IsADirectoryError:
        raise DamagedRunError(Damage(url, "is a folder, not a file")) from None
    except PermissionError:
        raise DamagedRunError(Damage(url, UNREADABLE)) from None
    except OSError as exc:
        raise DamagedRunError(Damage(url, f"cannot be read ({exc.strerror or type(exc).__name__})")) from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise DamagedRunError(Damage(url, f"larger than {MAX_MANIFEST_BYTES // 2**20} MiB; not a manifest"))
    try:
        manifest = json.loads(data.decode("utf-8", errors="surrogateescape"))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DamagedRunError(Damage(url, f"damaged manifest, not valid JSON ({str(exc)[:120]}); the run's tables are still readable with pandas")) from None
    problem = manifest_problem(manifest)
    if problem:
        raise DamagedRunError(Damage(url, problem))
    return _printable_manifest(manifest) if _MAY_NEED_ESCAPES.search(data) else manifest


_MAY_NEED_ESCAPES = re.compile(rb"[\\\x80-\xff]")
"""A manifest of plain ASCII without a backslash holds no control character (JSON has them only as
escapes), no lone surrogate and no bidi control: the common case, left as it is."""


def _printable_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its user text escaped once, for every surface that shows it (terminal,
    dashboard, exports, notebook, the runs index): control characters, bidi controls, lone
    surrogates and undecodable bytes as `\\x1b`, `\\u202e`, `\\udcff` (`tpu_perf.text`). A name and
    its tags are one line each; messages keep their line breaks."""
    manifest = printable_tree(manifest)
    if isinstance(manifest.get("name"), str):
        manifest["name"] = printable(manifest["name"])
    if isinstance(manifest.get("tags"), dict):
        manifest["tags"] = printable_tree(manifest["tags"], multiline=False)
    return manifest


UNREADABLE = "not readable by this user; ask its owner to `chmod a+r` it, or record with umask 002 in a team store (docs/store.md: permissions)"

MISSING_TABLE = "missing (the run wrote this table; it was deleted or not copied): its numbers are unknown, not zero"

MAX_MANIFEST_BYTES = 16 * 2**20
"""A run.json is a few KiB; one larger than this is not read (it is not a manifest)."""


def check_run(folder: str | Path, fs: Any = None) -> Damage | None:
    """None when the run folder at `folder` (path or URL; or a path on `fs`) can be read, else its
    `Damage`: the manifest against its schema, and the checked tables' schemas (their footers only).
    What `ls`, the runs page and the runs index call to tell damaged runs from healthy ones."""
    if fs is None:
        fs, folder = filesystem(str(folder))
    folder = str(folder)
    try:
        _open_checked(fs, folder)
    except DamagedRunError as exc:
        return dataclasses.replace(exc.damage, run_id=_folder_name(folder))
    except DataError as exc:
        return Damage(to_url(fs, folder), str(exc), _folder_name(folder))
    return None


CHECKED_TABLES = ("steps", "compiles")
"""Tables whose schema (Parquet footer) is checked when a store is listed: those every listing reads."""


def _open_checked(fs: Any, folder: str) -> Run:
    """`_open_run`, and the checked tables' footers against their schemas (DamagedRunError if not)."""
    run = _open_run(fs, folder)
    for host in run.hosts or (run,):
        for table in CHECKED_TABLES:
            _check_table_schema(host, table)
    return run


def _check_table_schema(run: Run, table: str) -> None:
    parquet = run.file_path(layout.parquet_name(table))
    url = to_url(run._fs, parquet)
    try:
        if not run._fs.exists(parquet):  # JSON lines stand for a table the recorder could not convert (a full disk)
            problem = MISSING_TABLE if table in (run.manifest.get("tables") or ()) and not run._fs.exists(run.file_path(layout.jsonl_name(table))) else None
        else:
            with open_regular(run._fs, parquet) as f:
                problem = schema_problem(table, pq.ParquetFile(f, pre_buffer=False).schema_arrow)
    except PermissionError:
        problem = UNREADABLE
    except NotAFileError as exc:
        problem = exc.strerror
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for damaged files
        problem = f"cannot be read ({type(exc).__name__}: {str(exc)[:160]})"
    if problem:
        raise DamagedRunError(Damage(url, problem))


JOB_STATUS_ORDER = ("running", "crashed", "failed", "interrupted", "completed")
"""A job's status is its processes' first in this order: one live process keeps it running, one
crashed process makes it crashed."""


def job_status(statuses: list[str]) -> str:
    for status in JOB_STATUS_ORDER:
        if status in statuses:
            return status
    return statuses[0] if statuses else "crashed"


def _shard_dirs(fs: Any, path: str) -> list[str]:
    """The folders of a job's processes that hold a manifest."""
    hosts_dir = join(path, layout.HOSTS_DIR)
    if not fs.exists(hosts_dir):
        return []
    return [d for d in sorted(fs.ls(hosts_dir, detail=False)) if fs.exists(join(d, layout.MANIFEST))]


def _by_index(manifest: dict[str, Any]) -> tuple[bool, int]:
    index = manifest.get("process_index")
    return (index is None, int(index or 0))


def shard_manifests(fs: Any, path: str) -> list[tuple[dict[str, Any], str]]:
    """(manifest, effective status) of each process's shard of the job at `path`, by index."""
    found = []
    for shard in _shard_dirs(fs, path):
        try:
            manifest = _read_manifest(fs, shard)
        except (RunNotFoundError, DataError):
            continue
        found.append((manifest, effective_status(manifest)))
    return sorted(found, key=lambda m: _by_index(m[0]))


def _open_job(fs: Any, path: str, manifest: dict[str, Any]) -> Run:
    """A job's run: its processes' shards under hosts/, the first one's tables and manifest, the
    job's id, and a status made of every process's effective status."""
    hosts = []
    for shard in _shard_dirs(fs, path):
        try:
            hosts.append(_open_run(fs, shard))
        except DataError as exc:
            warnings.warn(str(exc), stacklevel=3)
    hosts.sort(key=lambda h: _by_index(h.manifest))
    if not hosts:  # no process has written its shard yet
        return Run(id=str(manifest["id"]), url=to_url(fs, path), manifest=manifest, status=effective_status(manifest), _fs=fs, _path=path)
    primary = hosts[0]
    merged = {**primary.manifest, **{k: v for k, v in manifest.items() if k in ("id", "job", "name", "tags", "schema_version")}}
    merged["process_count"] = max([h.manifest.get("process_count") or 0 for h in hosts] + [len(hosts)])
    status = job_status([h.status for h in hosts])
    merged["status"] = status
    culprit = next(h for h in hosts if h.status == status)  # the job's outcome is that process's
    for key in ("exit_code", "error"):
        merged[key] = culprit.manifest.get(key)
    if culprit is not primary and culprit.manifest.get("error"):
        merged["error"] = {**culprit.manifest["error"], "message": f"process {culprit.manifest.get('process_index')}: {culprit.manifest['error'].get('message')}"}
    return Run(id=str(manifest["id"]), url=to_url(fs, path), manifest=merged, status=status, _fs=fs, _path=primary._path, hosts=tuple(hosts))


def _open_run(fs: Any, path: str) -> Run:
    manifest = _read_manifest(fs, path)
    if manifest.get("job"):
        return _open_job(fs, path, manifest)
    return Run(
        id=str(manifest["id"]),
        url=to_url(fs, path),
        manifest=manifest,
        status=effective_status(manifest),
        _fs=fs,
        _path=path,
    )


def _run_dirs(store: str) -> tuple[Any, list[str]]:
    fs, base = filesystem(store)
    try:
        if not fs.exists(base):
            return fs, []
        if not fs.isdir(base):
            raise UsageError(f"--store {store}: is a file, not a folder; give the folder that holds the runs")
        dirs = [p for p in fs.ls(base, detail=False) if fs.isdir(p) and fs.exists(join(p, layout.MANIFEST))]
    except PermissionError:
        raise DataError(f"{store}: the store folder is not readable by this user; ask its owner to `chmod a+rx` it (docs/store.md: permissions)") from None
    except NotADirectoryError:
        raise UsageError(f"--store {store}: lies under a file, not a folder; give the folder that holds the runs") from None
    return fs, sorted(dirs)


def load_run(run: str | Path, store: str | None = None) -> Run:
    """Load a run by folder path or URL, by id, or by a unique prefix of an id in `store`."""
    ref = str(run)
    fs, path = filesystem(ref)
    if fs.exists(join(path, layout.MANIFEST)):
        return _open_run(fs, path)
    store = store or layout.default_store()
    sfs, dirs = _run_dirs(store)
    ids = {d.rstrip("/").rsplit("/", 1)[-1]: d for d in dirs}
    if ref in ids:
        return _open_run(sfs, ids[ref])
    matches = [i for i in ids if i.startswith(ref)]
    if len(matches) == 1:
        return _open_run(sfs, ids[matches[0]])
    if len(matches) > 1:
        raise RunNotFoundError(f"run '{ref}' is ambiguous in {store}: {', '.join(sorted(matches)[:5])}; give more of the id")
    names = {}
    for i, d in ids.items():
        try:
            names.setdefault(str(_read_manifest(sfs, d).get("name") or ""), []).append(i)
        except Exception:
            continue
    if len(names.get(ref, [])) == 1:
        return _open_run(sfs, ids[names[ref][0]])
    if len(names.get(ref, [])) > 1:
        raise RunNotFoundError(_ambiguous_name(sfs, ref, [(i, ids[i]) for i in names[ref]], store))
    close = difflib.get_close_matches(ref, list(ids) + [n for n in names if n], n=3, cutoff=0.5)
    hint = f"; close matches: {', '.join(close)}" if close else f"; `tpu-perf ls --store {store}` lists {len(ids)} run(s)"
    raise RunNotFoundError(f"no run '{ref}' in {store}{hint}")


def _ambiguous_name(fs: AbstractFileSystem, name: str, runs: list[tuple[str, str]], store: str) -> str:
    """One line naming every run called `name`: id, start time and status, newest first."""
    described = []
    for run_id, folder in sorted(runs, reverse=True):
        manifest = _read_manifest(fs, folder)
        started = manifest.get("started_at")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "start unknown"
        described.append(f"{run_id} ({when}, {manifest.get('status') or 'unknown status'})")
    return f"{len(runs)} runs in {store} are named '{name}': {'; '.join(described)}; give a run id instead"


def scan_runs(store: str | None = None, *, check_tables: bool | None = None) -> tuple[list[Run], list[Damage]]:
    """Every run in `store`, oldest first: the loadable ones, and the damage of those that are not
    (one `Damage` each, naming the file and field). A damaged run never stops the others.

    `check_tables` also reads the steps and compiles tables' footers (`CHECKED_TABLES`); by
    default only in a local store, where that costs a fraction of a millisecond per run (in a
    remote one, two requests per run: a damaged table is then found when it is read)."""
    store = store or layout.default_store()
    fs, dirs = _run_dirs(store)
    check_tables = is_local(store) if check_tables is None else check_tables
    runs, damaged = [], []
    for d in dirs:
        try:
            runs.append(_open_checked(fs, d) if check_tables else _open_run(fs, d))
        except DamagedRunError as exc:
            damaged.append(dataclasses.replace(exc.damage, run_id=_folder_name(d)))
        except DataError as exc:
            damaged.append(Damage(to_url(fs, d), str(exc), _folder_name(d)))
    return runs, damaged


def _folder_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def list_runs(store: str | None = None) -> list[Run]:
    """Every loadable run in `store`, oldest first. Damaged folders are skipped with a warning."""
    runs, damaged = scan_runs(store)
    for damage in damaged:
        warnings.warn(f"{damage}; the run is damaged", stacklevel=2)
    return runs
