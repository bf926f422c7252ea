"""`tpu-perf import PATH`: make a run from traces captured elsewhere (XProf log dir, .xplane.pb, Kineto)."""


import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from tpu_perf.store import layout


def import_traces(path: Path, *, store: str, name: str | None = None, max_bytes: int | None = None, log: Callable[[str], None] | None = None, engine: str = "pool") -> str:
    """Read every trace under `path` first (bad files stop here, before any run exists), then write a run.
    Traces larger than `max_bytes` together (default: half the available memory) are refused.

    A multi-host XSpace capture (one `.xplane.pb` per host) becomes a job run instead, one shard
    per host, each host read and written by its own task on `engine` (commands/import_job.py);
    there `max_bytes` bounds the largest host file, what one task holds."""
    from tpu_perf.commands.import_job import import_job, parse_engine
    from tpu_perf.store import RunWriter
    from tpu_perf.traces.imported_run import import_manifest, steps_from_trace
    from tpu_perf.traces.ingest import (
        check_readable,
        check_size,
        default_max_bytes,
        find_traces,
        read_traces,
        write_tables,
    )
    from tpu_perf.traces.kineto_scan import InvalidEventsWarning

    parse_engine(engine)
    xplanes, _ = find_traces(path)
    if len(xplanes) > 1:
        largest = max(xplanes, key=lambda f: os.stat(f).st_size)
        check_size([largest], default_max_bytes() if max_bytes is None else max_bytes)
        return import_job(xplanes, source=path, store=store, name=name or Path(path).name.split(".")[0] or "imported", engine=engine, argv=sys.argv, log=log)
    started = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InvalidEventsWarning)
        tables = read_traces(path, max_bytes=max_bytes)
    notes = [str(w.message) for w in caught if issubclass(w.category, InvalidEventsWarning)]
    for note in notes:
        (log or (lambda line: None))(f"tpu-perf: note: {note}")
    check_readable(tables)
    manifest = import_manifest(path, tables, name=name, started=started, argv=sys.argv, cwd=os.getcwd())
    writer = RunWriter.create(store, manifest)
    try:
        write_tables(writer, tables)
        steps = steps_from_trace(tables.device_steps)
        if not steps.empty:
            writer.write_table("steps", steps)
        for f in tables.files:  # the same capture then opens in XProf / Perfetto from the run
            dest = writer.dir / layout.TRACE_DIR / ("plugins/profile/imported" if f.endswith(".xplane.pb") else "") / Path(f).name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    except BaseException:
        writer.finish("failed", 1, error={"message": "import did not finish"})
        raise
    return writer.finish("completed", 0, warnings=notes)


def register(app: typer.Typer) -> None:
    from tpu_perf.commands.console import err
    from tpu_perf.commands.options import StoreOption

    @app.command("import")
    def import_cmd(
        path: Annotated[Path, typer.Argument(help="An XProf/TensorBoard log dir, a .xplane.pb, a folder of per-host xplanes, or Kineto .json(.gz) traces.")],
        name: Annotated[str | None, typer.Option(help="Run name (default: the file or folder name).")] = None,
        store: StoreOption = layout.DEFAULT_STORE,
        max_bytes: Annotated[int | None, typer.Option("--max-bytes", min=1, help="Refuse traces larger than this, compressed ones by what they hold (default: half the available memory); in a multi-host capture, the largest host file.")] = None,
        engine: Annotated[str, typer.Option(help="What reads a multi-host capture, one host file per task: pool (processes on this machine), ray (a local Ray cluster), ray=auto or ray=ray://HOST:PORT (an existing one; needs `tpu-perf[ray]`).")] = "pool",
    ) -> None:
        """Make a run from traces captured elsewhere; `tpu-perf report` then works on it."""
        from tpu_perf.store.writable import check_writable_store

        check_writable_store(store)
        url = import_traces(path, store=store, name=name, max_bytes=max_bytes, engine=engine, log=lambda line: err.print(line, style="yellow", highlight=False, markup=False))
        err.print(f"tpu-perf: imported {path} as run {Path(url).name} into {url}", highlight=False, markup=False)
        sys.stdout.write(url + "\n")
