"""Writes one run folder safely while a recording is live.

Two rules keep the user's data safe whatever happens to the process:
- a file is append-only (JSON lines, flushed at least every second; readers drop a torn last line),
- or it is written whole under a temporary name and renamed over the old one.
So a recording killed at any instant leaves a loadable run.

The writer always writes to a local folder. For a remote store (any fsspec URL that is not a local
path) that folder is a staging copy, uploaded every few seconds while the run is live.

A process of a multi-process job starts as a run of its own and moves into the job's run
(`<job>/hosts/<shard>/`) once the job's processes agreed on its id (`join_job`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tpu_perf import jsonio
from tpu_perf.errors import UsageError
from tpu_perf.store import layout
from tpu_perf.store.fs import filesystem, is_local, join, to_url


@functools.cache
def process_umask() -> int:
    """The process umask, read without changing it where /proc tells it (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)  # no /proc: read it by setting it, and put it back at once
        os.umask(umask)
        return umask


def file_mode() -> int:
    """The mode a plain `open()` gives a new file under the umask (0o644 under the usual 022,
    0o664 under a team's 002). Temporary files from `mkstemp` are 0o600 whatever the umask; they
    get this mode before they are renamed into place, so a shared store stays readable."""
    return 0o666 & ~process_umask()


def follow_umask(folder: Path) -> None:
    """Give every file and folder under `folder` the umask's mode: files other code wrote there
    (the profiler's trace folders are 0o755 whatever the umask) read like tpu-perf's own."""
    dir_mode = 0o777 & ~process_umask()
    for path in [folder, *folder.rglob("*")]:
        try:
            if path.is_symlink():
                continue
            path.chmod(dir_mode if path.is_dir() else file_mode())
        except OSError:
            continue  # not ours to change (another user's file in a shared folder)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename; the file
    gets the process umask's mode (`file_mode()`), as a plain `open()` would give it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


VANISHED = "the run folder (or its files) was deleted during the run: it was made again, and the records written before were kept from the files still open"

MAX_QUEUED = 200_000
"""Records of one table held in memory while the disk refuses them (a few tens of MB)."""


def _why(exc: BaseException) -> str:
    """`[Errno 28] No space left on device` as `No space left on device`; other errors by type and text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {str(exc)[:200]}"


REMOTE_SYNC_INTERVAL_S = 5.0
"""A remote run's staged files reach the store at least this often while it runs, so a killed or
preempted process leaves its steps readable there (the store promises 10 s)."""


class RunWriter:
    """The one writer of a run folder. Thread-safe: collectors append from any thread."""

    def __init__(self, local_dir: Path, manifest: dict[str, Any], upload_to: str | None, store: str) -> None:
        self.dir = local_dir
        self.manifest = manifest
        self.store = store
        self._upload_to = upload_to
        self._lock = threading.Lock()
        self._dir_lock = threading.RLock()
        """Held while a file is written by path, so the folder never moves under a writer."""
        self._pending: dict[str, list[str]] = {}
        self._files: dict[str, Any] = {}
        self._closed = False
        self._synced: dict[str, tuple[int, int]] = {}
        """Remote runs: (size, mtime) of each staged file as last uploaded."""
        self._synced_at = 0.0
        self._sync_lock = threading.Lock()
        self.detached = False
        """Set in a forked child: it must not touch the parent's run folder."""
        self.problems: list[str] = []
        """What could not be written (a full disk, a run folder deleted under the run), one line
        each: the recording goes on, keeps what it can, and the final manifest lists them under
        `warnings`."""
        self._lost: dict[str, int] = {}
        """Records of each table dropped after the disk refused them for too long."""

    # -- creation -----------------------------------------------------------------------------
    @classmethod
    def create(cls, store: str, manifest: Mapping[str, Any], *, shard: str | None = None) -> RunWriter:
        """Create the run folder `<store>/<id>/` and write its first manifest (status `running`).

        With `shard`, `id` names a job and the folder is `<store>/<id>/hosts/<shard>/`."""
        run_id = manifest.get("id") or layout.new_run_id()
        full = {"schema_version": layout.SCHEMA_VERSION, **manifest, "id": run_id}
        full.setdefault("status", "running")
        rel = layout.shard_path(run_id, shard) if shard is not None else run_id
        if is_local(store):
            local_dir = Path(store).expanduser().resolve() / rel
            upload_to = None
        else:
            local_dir = Path(tempfile.mkdtemp(prefix=f"tpu-perf-{run_id}-")) / run_id
            fs, base = filesystem(store)
            upload_to = to_url(fs, join(base, rel))
        try:
            local_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise UsageError(f"store {store}: {rel} exists already; a run id ({layout.RUN_ID_ENV}?) is used once per run") from None
        writer = cls(local_dir, full, upload_to, store)
        writer.write_manifest()
        try:
            if shard is not None:
                writer.write_job_manifest(run_id, primary=False)
            writer.sync_remote(force=True)  # the run is on the store before the script starts
        except Exception as exc:
            shutil.rmtree(local_dir if upload_to is None else local_dir.parent, ignore_errors=True)
            raise UsageError(f"store {store}: cannot write there ({type(exc).__name__}: {exc}); check the URL and the credentials your {store.split('://')[0]} client uses") from None
        return writer

    @property
    def run_id(self) -> str:
        return str(self.manifest["id"])

    @property
    def url(self) -> str:
        """Where the run will be read from once it ends (the local folder, or the remote URL)."""
        return self._upload_to or str(self.dir)

    # -- manifest -----------------------------------------------------------------------------
    def update_manifest(self, *, final: bool = False, **fields: Any) -> None:
        """Merge `fields` into run.json (dicts are merged one level deep) and rewrite it atomically
        (`write_manifest`)."""
        with self._lock:
            for key, value in fields.items():
                old = self.manifest.get(key)
                if isinstance(old, dict) and isinstance(value, dict):
                    self.manifest[key] = {**old, **value}
                else:
                    self.manifest[key] = value
        self.write_manifest(final=final)

    def write_manifest(self, *, final: bool = False) -> None:
        """Rewrite run.json from the manifest held here. A write the disk refuses is a problem
        noted once (the next heartbeat tries again); the `final` one, when its temporary copy
        cannot be written, overwrites run.json in place: the run then ends with its status."""
        if self.detached:
            return
        with self._lock:
            self.manifest["heartbeat_at"] = time.time()
            data = jsonio.dumps(self.manifest, sort_keys=True, lossy=True).encode()
        with self._dir_lock:
            try:
                write_atomic(self.dir / layout.MANIFEST, data)
            except OSError as exc:
                if final and self._overwrite(self.dir / layout.MANIFEST, data):
                    return
                self.problem(f"{layout.MANIFEST} could not be rewritten ({_why(exc)})")

    @staticmethod
    def _overwrite(path: Path, data: bytes) -> bool:
        """Overwrite `path` in place (no new file: what a full disk still allows); True if written."""
        try:
            with open(path, "r+b") as f:
                f.write(data)
                f.truncate()
            return True
        except OSError:
            return False

    def problem(self, message: str) -> None:
        """Note what could not be written, once per kind of failure."""
        with self._lock:
            if message not in self.problems:
                self.problems.append(message)

    def detach(self) -> None:
        """In a forked child: drop what is queued (the parent writes it) and write nothing more."""
        self.detached = True
        self._lock = threading.Lock()  # the parent's lock may have been held by a thread at the fork
        self._closed = True
        self._pending = {}
        self._files = {}

    # -- append-only tables -------------------------------------------------------------------
    def append(self, table: str, record: Mapping[str, Any]) -> None:
        """Queue one record for `<table>.jsonl`; `flush()` (called every second) writes it."""
        line = jsonio.dumps_record(record)
        with self._lock:
            if self._closed:
                return
            self._pending.setdefault(table, []).append(line)

    def flush(self) -> None:
        """Append every queued record to its JSON-lines file and push it to the OS. Records the
        disk refuses stay queued for the next flush (at most MAX_QUEUED a table, the oldest then
        dropped and counted); a file is never left with a torn line in its middle."""
        with self._lock:
            pending, self._pending = self._pending, {}
            for table, lines in pending.items():
                try:
                    self._append(table, ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
                except OSError as exc:
                    self._requeue(table, lines, exc)

    def _append(self, table: str, data: bytes) -> None:
        f = self._files.get(table)
        if f is None:
            if not self.dir.is_dir():  # the run folder was deleted under the run: made again for what comes
                self.dir.mkdir(parents=True, exist_ok=True)
                if VANISHED not in self.problems:
                    self.problems.append(VANISHED)
            f = open(self.dir / layout.jsonl_name(table), "a+b", buffering=0)  # noqa: SIM115 - kept open: read back at the end
            self._files[table] = f
        fd = f.fileno()
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # no torn line before the records that follow
            raise

    def _requeue(self, table: str, lines: list[str], exc: OSError) -> None:
        queued = lines + self._pending.get(table, [])
        if len(queued) > MAX_QUEUED:
            self._lost[table] = self._lost.get(table, 0) + len(queued) - MAX_QUEUED
            queued = queued[-MAX_QUEUED:]
        self._pending[table] = queued
        message = f"{layout.jsonl_name(table)} could not be written ({_why(exc)}); its records are held until the disk takes them"
        if message not in self.problems:
            self.problems.append(message)

    # -- whole files --------------------------------------------------------------------------
    def write_table(self, table: str, frame: pd.DataFrame | Iterable[Mapping[str, Any]]) -> None:
        """Write a whole table as Parquet, atomically."""
        if self.detached:
            return
        df = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(list(frame))
        with self._dir_lock:
            path = self.dir / layout.parquet_name(table)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.fchmod(fd, file_mode())
            os.close(fd)
            try:
                df.to_parquet(tmp, index=False)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def write_text(self, relpath: str, text: str) -> Path:
        """Write a whole text file; one the disk refuses is a problem noted, not an error (collectors
        write HLO text from inside the script's calls)."""
        with self._dir_lock:
            path = self.dir / relpath
            if not self.detached:
                try:
                    write_atomic(path, text.encode("utf-8", "surrogateescape"))
                except OSError as exc:
                    self.problem(f"{relpath} could not be written ({_why(exc)})")
        return path

    # -- end of run ---------------------------------------------------------------------------
    def compact(self) -> None:
        """Turn each `<table>.jsonl` into `<table>.parquet`; the JSON lines go only once it exists.

        Each table is read back from the file this writer kept open, so records survive their file
        (or the whole run folder) being deleted during the run: they are written again. A table
        that cannot become Parquet (a full disk, values Arrow cannot type) stays JSON lines, which
        readers take as well; what happened is a problem noted for the manifest."""
        from tpu_perf.store.reader import read_jsonl  # one parser for both halves

        self.flush()
        with self._lock:
            held = {table: self._read_back(table, f) for table, f in self._files.items()}
            for f in self._files.values():
                with contextlib.suppress(OSError):
                    f.close()
            self._files.clear()
            queued = {table: lines for table, lines in self._pending.items() if lines}
            self._pending = {}
        with self._dir_lock:
            try:
                on_disk = {p.stem: p for p in self.dir.glob("*.jsonl")}
            except OSError:
                on_disk = {}
            for table in sorted({*held, *on_disk, *queued}):
                jsonl = self.dir / layout.jsonl_name(table)
                data = held.get(table)
                if data is None:
                    try:
                        data = jsonl.read_bytes()
                    except OSError:
                        data = b""
                if table in held and not jsonl.exists() and VANISHED not in self.problems:
                    self.problem(VANISHED)
                missing = not jsonl.exists()
                refused = queued.get(table, [])
                if refused:  # records the disk refused until now
                    data += ("\n".join(refused) + "\n").encode("utf-8", "surrogatepass")
                self._compact_table(table, jsonl, data, unwritten=data.splitlines(keepends=True) if missing else [line + "\n" for line in refused], read=read_jsonl)
        for table, count in self._lost.items():
            self.problem(f"{count} {table} records were dropped: the disk refused them for the whole run")

    @staticmethod
    def _append_lines(path: Path, lines: list[Any], chunk: int = 256) -> tuple[int, str]:
        """Append whole `lines` (str or bytes, each ending in a newline) to `path` in chunks until
        the disk refuses one (cut back, so no torn line); the count written and why it stopped."""
        written = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode())
        except OSError as exc:
            return 0, _why(exc)
        try:
            for start in range(0, len(lines), chunk):
                part = lines[start : start + chunk]
                data = b"".join(p if isinstance(p, bytes) else p.encode("utf-8", "surrogatepass") for p in part)
                size = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    if chunk > 1:  # the lines that still fit, one by one
                        more, why = RunWriter._append_lines(path, part, chunk=1)
                        return written + more, why
                    return written, _why(exc)
                written += len(part)
        finally:
            os.close(fd)
        return written, ""

    @staticmethod
    def _read_back(table: str, f: Any) -> bytes | None:
        try:
            f.seek(0)
            return f.read()
        except OSError:
            return None

    def _compact_table(self, table: str, jsonl: Path, data: bytes, *, unwritten: list[Any], read: Any) -> None:
        """`data` (the whole table as JSON lines) as `<table>.parquet`; else the JSON-lines file
        completed with `unwritten` (records not in it: refused by the disk, or all of them when the
        file was deleted), as many whole lines as the disk takes."""
        try:
            frame = read(data, name=str(jsonl), warn=False)
        except Exception as exc:  # noqa: BLE001 - a recording never ends in a traceback of its own
            self.problem(f"{jsonl.name} could not be read back ({type(exc).__name__}: {exc})")
            return
        try:
            self.write_table(table, frame)
        except Exception as exc:  # noqa: BLE001 - full disk, or values Arrow cannot type
            self.problem(f"{table} could not be written as Parquet ({_why(exc)}); it is kept as {jsonl.name}, which readers take as well")
            if unwritten:
                written, why = self._append_lines(jsonl, unwritten)
                if written < len(unwritten):
                    self.problem(f"{len(unwritten) - written} {table} records (the last) are lost: {jsonl.name} takes no more ({why})")
            return
        if unwritten:  # the records it held were written after all: say so instead of "held"
            held = f"{jsonl.name} could not be written ("
            with self._lock:
                self.problems = [p if not p.startswith(held) else p.split("; ", 1)[0] + f" during the run; its records were held in memory and written at the end, in {layout.parquet_name(table)}" for p in self.problems]
        with contextlib.suppress(OSError):
            jsonl.unlink(missing_ok=True)

    def finish(self, status: str, exit_code: int | None, *, describe_job: bool = True, **fields: Any) -> str:
        """Compact the tables, write the final manifest and upload a staged run; return its URL.
        A job's shard also rewrites the job's run.json (reading every shard's manifest) unless
        `describe_job` is False: a job importer writes it once, after its last shard."""
        if status not in layout.FINAL_STATUSES:
            raise ValueError(f"not a final status: {status}")
        self.compact()
        with self._lock:
            self._closed = True
        written = [t for t in layout.APPEND_TABLES if (self.dir / layout.parquet_name(t)).exists() or (self.dir / layout.jsonl_name(t)).exists()]
        if self.problems:
            fields["warnings"] = [*(fields.get("warnings") or []), *self.problems]
        self.update_manifest(final=True, status=status, exit_code=exit_code, ended_at=time.time(), tables=written, **fields)
        follow_umask(self.dir)
        if self._upload_to:
            try:
                self.sync_remote(force=True)
            except Exception as exc:  # noqa: BLE001 - the staged copy is then the only one: kept
                self.problem(f"the run could not be uploaded to {self._upload_to} ({_why(exc)}); it is kept at {self.dir}")
                return str(self.dir)
        if describe_job and self.manifest.get("process_count"):
            try:
                self.write_job_manifest(self.run_id, primary=True, final=True)
            except OSError as exc:  # the shard is complete; readers take the job's status from the shards
                self.problem(f"the job's {layout.MANIFEST} could not be rewritten ({_why(exc)})")
        if self._upload_to:
            shutil.rmtree(self.dir.parent, ignore_errors=True)
        return self.url

    def discard(self) -> None:
        """Delete this finished run from the store: only for a run that holds nothing of the
        user's (a launcher whose spawned workers were recorded as a job of their own)."""
        if self._upload_to is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            fs, path = filesystem(self._upload_to)
            fs.rm(path, recursive=True)

    def job_url(self, job_id: str) -> str:
        """Where the run of job `job_id` in this writer's store is read from."""
        if self._upload_to is None:
            return str(Path(self.store).expanduser().resolve() / job_id)
        fs, base = filesystem(self.store)
        return to_url(fs, join(base, job_id))

    # -- multi-process jobs -------------------------------------------------------------------
    def join_job(self, job_id: str, shard: str, **fields: Any) -> None:
        """Move this process's run to `<store>/<job_id>/hosts/<shard>/` and record `fields`
        (process index, count...) in its manifest; shard 0 also (re)writes the job's manifest.

        Local stores rename the folder (open files follow it); remote ones re-upload to the new
        prefix and delete the old one. Nothing is written while the folder moves."""
        rel = layout.shard_path(job_id, shard)
        old_remote = None
        with self._sync_lock, self._dir_lock, self._lock:
            if self._upload_to is None:
                target = Path(self.store).expanduser().resolve() / rel
                if target != self.dir:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if target.exists():
                        raise FileExistsError(f"{target} exists already")
                    os.rename(self.dir, target)
                    self.dir = target
            else:
                fs, base = filesystem(self.store)
                new = to_url(fs, join(base, rel))
                if new != self._upload_to:
                    old_remote, self._upload_to, self._synced = self._upload_to, new, {}
        self.update_manifest(id=job_id, **fields)
        self.write_job_manifest(job_id, primary=shard == "0")
        if self._upload_to:
            self.sync_remote(force=True)
            if old_remote is not None:
                fs, path = filesystem(old_remote)
                fs.rm(path, recursive=True)

    def write_job_manifest(self, job_id: str, *, primary: bool, final: bool = False) -> None:
        """`<job>/run.json` from this process's manifest (`write_job_manifest` below)."""
        write_job_manifest(self.store, job_id, self.manifest, primary=primary, final=final)

    # -- remote stores ------------------------------------------------------------------------
    def sync_remote(self, *, force: bool = False) -> None:
        """Upload the staged files that changed since the last upload (a remote run only), at most
        every REMOTE_SYNC_INTERVAL_S unless `force`: the manifest last, so a reader never sees a
        manifest newer than its tables; files gone from the staging folder (JSON lines compacted to
        Parquet) are deleted remotely after their replacement is up. Object stores cannot append, so
        a growing table is uploaded whole each time."""
        if not self._upload_to or self.detached:
            return
        with self._sync_lock:
            now = time.monotonic()
            if not force and now - self._synced_at < REMOTE_SYNC_INTERVAL_S:
                return
            self._synced_at = now
            fs, base = filesystem(self._upload_to)
            files = sorted(p for p in self.dir.rglob("*") if p.is_file() and not p.name.startswith("."))
            files.sort(key=lambda p: p.name == layout.MANIFEST)
            present = set()
            for path in files:
                rel = path.relative_to(self.dir).as_posix()
                present.add(rel)
                stat = path.stat()
                key = (stat.st_size, stat.st_mtime_ns)
                if self._synced.get(rel) != key:
                    fs.put_file(str(path), join(base, rel))
                    self._synced[rel] = key
            for rel in [r for r in self._synced if r not in present]:
                fs.rm_file(join(base, rel))
                del self._synced[rel]


def write_job_manifest(store: str, job_id: str, manifest: Mapping[str, Any], *, primary: bool, final: bool = False, shards: list[tuple[dict[str, Any], str]] | None = None) -> None:
    """`<job>/run.json` in `store`, from a process's `manifest`: written by the job's first
    process (shard 0), and by any other whose process 0 left none (it is not recorded, or not yet), so the job is listed either way.
    `final` (each process as it ends): it also lists every process's status as the shards
    say it then; the last process to end writes the complete list. Readers take the statuses
    from the shards themselves, so a process that dies unseen is never reported as running.
    `shards`: each shard's (final manifest, status), from a caller that wrote them all (a job
    import), instead of reading every shard back (one request each on an object store)."""
    job = {key: manifest.get(key) for key in layout.JOB_MANIFEST_FIELDS if key in manifest}
    job.update(schema_version=layout.SCHEMA_VERSION, id=job_id, job=True, status="running", started_at=manifest.get("started_at"))
    local = is_local(store)
    fs, base = filesystem(str(Path(store).expanduser().resolve()) if local else store)
    path = join(base, job_id, layout.MANIFEST)
    if final:
        from tpu_perf.store.reader import job_status, shard_manifests

        if shards is None:  # (manifest, effective status) per shard: read back unless the caller has them
            shards = shard_manifests(fs, join(base, job_id))
        job["processes"] = [{key: m.get(key) for key in ("process_index", "host", "pid", "exit_code", "started_at", "ended_at")} | {"status": status, "devices": (m.get("hardware") or {}).get("local_device_count")} for m, status in shards]
        job["status"] = job_status([status for _, status in shards])
        job["ended_at"] = time.time()
    elif not primary and fs.exists(path):
        return
    data = jsonio.dumps(job, sort_keys=True, lossy=True).encode()
    if local:
        write_atomic(Path(path), data)
    else:
        fs.pipe_file(path, data)
