"""`tpu-perf import` of a multi-host XProf capture: one job run, each host's file in its own shard.

One task per host file reads that file alone (as `tpu-perf import FILE` would) and writes the host's
shard `<job>/hosts/<i>/` straight into the store, the way each process of a recorded job writes its
own. The machine that runs `import` holds the list of tasks and their one-line answers, never a
host's tables, so its memory stays flat as hosts grow. Job-level views are then queries over the
shards (store/shards.py).

Engines run the tasks (ENGINES, in the order `--engine` lists them):
- `pool`: processes on this machine, at most one per core and within the memory budget of
  traces/xspace_pool.py (the default);
- `ray`: one Ray task per host file, on a local Ray cluster started for the import, or an existing
  one (`ray=auto`, `ray=ray://HOST:PORT`), whose workers write the shards into the store.
Both run `import_host`, so a job's tables are the same whichever engine made them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_perf.errors import DataError, UsageError
from tpu_perf.store import RunWriter, layout
from tpu_perf.store.fs import filesystem, is_local, join, to_url
from tpu_perf.store.writer import write_job_manifest


@dataclass(frozen=True, kw_only=True)
class HostTask:
    """One host file of a capture and where its shard goes."""

    path: str
    index: int
    count: int
    job_id: str
    store: str
    name: str
    source: str
    """The capture as the user named it (for the manifest's `imported.from`)."""
    argv: tuple[str, ...]
    cwd: str


@dataclass(frozen=True, kw_only=True)
class HostDone:
    index: int
    hostname: str
    ops: int
    url: str
    manifest: dict[str, Any]
    """The shard's final run.json, for the job's (so the driver never reads the shards back)."""
    error: str | None = None
    """Why the host's file gave no tables (its shard is `failed` and says so); None when it did."""


def import_host(task: HostTask) -> HostDone:
    """Read one host's file and write its shard (tables, steps, the file itself); the shard's
    manifest names the host the capture came from and its place in the job."""
    from tpu_perf.traces.imported_run import import_manifest, steps_from_trace
    from tpu_perf.traces.ingest import check_readable, write_tables
    from tpu_perf.traces.xspace import read_xspace

    started = time.time()
    try:
        tables = read_xspace([Path(task.path)], workers=1)
        check_readable(tables)
    except DataError as exc:  # the host's shard says why it has no tables; the other hosts go on
        return _failed_host(task, started, str(exc))
    manifest = import_manifest(task.source, tables, name=task.name, started=started, argv=list(task.argv), cwd=task.cwd)
    manifest.update(id=task.job_id, host=tables.hostnames[0], process_index=task.index, process_count=task.count, joined_by="import")
    writer = RunWriter.create(task.store, manifest, shard=str(task.index))
    try:
        write_tables(writer, tables)
        steps = steps_from_trace(tables.device_steps)
        if not steps.empty:
            writer.write_table("steps", steps)
        dest = writer.dir / layout.TRACE_DIR / "plugins/profile/imported" / Path(task.path).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(task.path, dest)  # the host's capture opens in XProf from its shard
    except BaseException:
        writer.finish("failed", 1, describe_job=False, error={"message": "import did not finish"})
        raise
    url = writer.finish("completed", 0, describe_job=False)
    return HostDone(index=task.index, hostname=tables.hostnames[0], ops=len(tables.ops), url=url, manifest=dict(writer.manifest))


def _failed_host(task: HostTask, started: float, error: str) -> HostDone:
    """A `failed` shard for a host file that gave no tables, so the job reads failed and names it."""
    host = Path(task.path).name.removesuffix(".xplane.pb")
    manifest = {"id": task.job_id, "name": task.name, "command": ["tpu-perf", "import", task.source], "cwd": task.cwd, "started_at": started, "host": host,
                "imported": {"from": task.source, "format": "xspace", "files": [task.path]}, "process_index": task.index, "process_count": task.count, "joined_by": "import"}
    writer = RunWriter.create(task.store, manifest, shard=str(task.index))
    writer.finish("failed", 3, describe_job=False, error={"message": error})
    return HostDone(index=task.index, hostname=host, ops=0, url=writer.url, manifest=dict(writer.manifest), error=error)


def run_pool(tasks: Sequence[HostTask], address: str | None) -> list[HostDone]:
    """Processes on this machine: one per host, at most one per core, within the memory budget."""
    from tpu_perf.traces.xspace_pool import _context, worker_count

    n = worker_count([os.stat(t.path).st_size for t in tasks], os.cpu_count())
    if n <= 1:
        return [import_host(t) for t in tasks]
    with ProcessPoolExecutor(n, mp_context=_context()) as pool:
        return list(pool.map(import_host, tasks))


RAY_OBJECT_STORE_BYTES = 128 * 2**20
"""Object store of a local Ray cluster started for an import: tasks return a line each, so Ray's
default (30 % of the machine's memory, in /dev/shm) would reserve memory nothing uses."""


def run_ray(tasks: Sequence[HostTask], address: str | None) -> list[HostDone]:
    """One Ray task per host file: a local cluster when `address` is None (stopped after), else
    the cluster at `address` (`auto`, `ray://HOST:PORT`)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray: Ray is not installed here; `pip install 'tpu-perf[ray]'`, or use --engine pool") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from an import
    started = not ray.is_initialized()
    if started:
        local = {"num_cpus": os.cpu_count() or 1, "object_store_memory": RAY_OBJECT_STORE_BYTES} if address is None else {}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR", **local)
    try:
        task = ray.remote(num_cpus=1)(import_host)
        return list(ray.get([task.remote(t) for t in tasks]))
    finally:
        if started:
            ray.shutdown()


ENGINES: tuple[tuple[str, Callable[[Sequence[HostTask], str | None], list[HostDone]]], ...] = (("pool", run_pool), ("ray", run_ray))


def parse_engine(value: str) -> tuple[str, str | None]:
    """`pool`, `ray` or `ray=ADDRESS` -> (engine, address); a UsageError names the choices."""
    name, sep, address = value.partition("=")
    names = [n for n, _ in ENGINES]
    if name not in names or (sep and (name != "ray" or not address)):
        raise UsageError(f"--engine {value}: expected one of pool, ray, ray=ADDRESS (ADDRESS: auto or ray://HOST:PORT)")
    return name, address or None


def import_job(files: Sequence[Path], *, source: Path, store: str, name: str, engine: str = "pool", argv: Sequence[str] = (), log: Callable[[str], None] | None = None) -> str:
    """Import one host file per task into shards of a new job run in `store`; returns its URL."""
    engine_name, address = parse_engine(engine)
    if address not in (None, "auto") and is_local(store):
        raise UsageError(f"--engine {engine} --store {store}: workers on other machines cannot write into this machine's folder; give a store they reach (gs://, s3://)")
    job_id = layout.new_run_id()
    tasks = [HostTask(path=str(f), index=i, count=len(files), job_id=job_id, store=store, name=name, source=str(source), argv=tuple(argv), cwd=os.getcwd()) for i, f in enumerate(files)]
    run = dict(ENGINES)[engine_name]
    done = run(tasks, address)
    fs, base = filesystem(str(Path(store).expanduser().resolve()) if is_local(store) else store)
    first = {"name": name, "command": ["tpu-perf", "import", str(source)], "cwd": os.getcwd(), "process_count": len(files), "started_at": time.time(), "tags": {}}
    shards = [(d.manifest, str(d.manifest["status"])) for d in sorted(done, key=lambda d: d.index)]
    write_job_manifest(store, job_id, first, primary=True, final=True, shards=shards)
    url = to_url(fs, join(base, job_id))
    failed = [d for d in done if d.error]
    if failed:
        raise DataError(f"{len(failed)} of {len(done)} host files gave no tables ({failed[0].error}); the job {url} holds the others, its shard {failed[0].index} says why")
    if log is not None:
        log(f"tpu-perf: {len(done)} hosts imported with --engine {engine}: {', '.join(d.hostname for d in sorted(done, key=lambda d: d.index)[:8])}{' ...' if len(done) > 8 else ''}")
    return url

