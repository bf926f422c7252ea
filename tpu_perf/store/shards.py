"""A job's tables across its processes, queried in place: one Arrow dataset over the shards' files.

Every process of a job writes its own tables into `hosts/<shard>/` (collectors/job.py), so a
job-level question ("which host spends longest in which op") is a query over one file per host.
A pyarrow dataset reads those files where they lie, on a local disk or an object store (through the
run's fsspec filesystem), projecting only the columns asked for; the shard comes from the folder
name (directory partitioning), so no file carries its host twice. pyarrow is already what every
table is written and read with; DuckDB would add a dependency for a scan plus a group-by that Arrow's
own `group_by` does (docs/multihost.md: job tables, measured).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds

from tpu_perf.store import layout
from tpu_perf.store.reader import Run

SHARD = "shard"
"""The column a dataset over shards adds: the shard folder's name (`0`, `1`, ...)."""


def shard_dataset(run: Run, table: str, schema: pa.Schema) -> ds.Dataset | None:
    """`table` of every process of the job `run` as one dataset with `schema` (the columns to read,
    each cast to its type whatever a shard wrote: a column that is all null in one shard reads as
    null of that type) plus the `shard` column. None when no shard holds the table as Parquet (a
    process still running writes JSON lines; read those with `Run.table`)."""
    if not run.hosts:
        return None
    files = [p for h in run.hosts if h._fs.exists(p := h.file_path(layout.parquet_name(table)))]
    if not files:
        return None
    fs = run.hosts[0]._fs
    base = run.hosts[0]._path.rstrip("/").rsplit("/", 1)[0]  # <job>/hosts
    full = pa.schema([*schema, pa.field(SHARD, pa.string())])
    partitioning = ds.partitioning(pa.schema([(SHARD, pa.string())]))
    return ds.dataset(files, filesystem=fs, format="parquet", schema=full, partitioning=partitioning, partition_base_dir=base)


def shard_index(run: Run) -> dict[str, int | None]:
    """Process index by shard folder name, from each shard's manifest."""
    out: dict[str, int | None] = {}
    for host in run.hosts:
        index = host.manifest.get("process_index")
        out[host._path.rstrip("/").rsplit("/", 1)[-1]] = int(index) if index is not None else None
    return out
