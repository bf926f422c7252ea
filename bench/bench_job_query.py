"""Job tables by query: per-op time over hosts from N shards' `ops.parquet`, three ways.

The job is N copies of one real shard (`tpu-perf import` of the TPU v6e x4 capture in tests/data:
65 ops rows, 4 devices), each with its own process index. Timed on the loaded job (manifests
read, `load_run`), best of 3:
- pyarrow dataset: `analyzers.job_ops.op_time_by_host` (what the report uses): one dataset over
  the shards' files, projected to 4 columns, grouped by (shard, op) in Arrow;
- DuckDB: `read_parquet('<job>/hosts/*/ops.parquet', hive_partitioning=false, filename=true)`
  grouped by (filename, name) in SQL, when the `duckdb` package is importable (it is not a
  tpu-perf dependency; install it anywhere on PYTHONPATH to compare);
- pandas per shard: `Run.table("ops")` of each host, concatenated and grouped (one file at a
  time, every column: what a job view would do without the query).

Run: PYTHONPATH=$PWD python bench/bench_job_query.py [--hosts 256 2048]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb"


def build(out: Path, hosts: int) -> Path:
    """A job folder of `hosts` shards, each a copy of one imported shard's manifest and ops."""
    from tpu_perf.traces.xplane_synth import write_pod

    files = write_pod(TPU, out / "log", hosts=2, copies=1)
    url = subprocess.run([sys.executable, "-m", "tpu_perf", "import", str(files[0].parents[2]), "--store", str(out / "seed")], capture_output=True, text=True, check=True).stdout.strip()
    seed = Path(url)
    job = out / "store" / seed.name
    (job / "hosts").mkdir(parents=True)
    shutil.copyfile(seed / "run.json", job / "run.json")
    manifest = json.loads((seed / "hosts" / "0" / "run.json").read_text())
    for i in range(hosts):
        shard = job / "hosts" / str(i)
        shard.mkdir()
        shutil.copyfile(seed / "hosts" / "0" / "ops.parquet", shard / "ops.parquet")
        (shard / "run.json").write_text(json.dumps({**manifest, "process_index": i, "process_count": hosts, "tables": []}))
    return job


def best(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def per_shard(run, pd):
    """Each shard's ops read alone (nothing cached), concatenated and grouped."""
    for h in run.hosts:
        h._tables.clear()
    frames = [h.table("ops").assign(host=h.manifest["process_index"]) for h in run.hosts]
    return pd.concat(frames).groupby(["host", "name"])["total_time_s"].sum()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[256, 2048])
    args = ap.parse_args()
    import pandas as pd

    from tpu_perf.analyzers.job_ops import op_time_by_host
    from tpu_perf.store import load_run

    for hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="tpu-perf-jobq-") as tmp:
            job = build(Path(tmp), hosts)
            load_s, run = best(lambda job=job: load_run(job), 1)
            arrow_s, by_host = best(lambda run=run: op_time_by_host(run))
            row = f"{hosts:>5} hosts: load_run {load_s:6.2f} s | pyarrow dataset {arrow_s:6.3f} s"
            if importlib.util.find_spec("duckdb") is not None:
                import duckdb

                sql = f"SELECT filename, name, sum(total_time_s) AS t, sum(occurrences) AS n FROM read_parquet('{job}/hosts/*/ops.parquet', filename=true) GROUP BY ALL"
                duck_s, duck = best(lambda sql=sql: duckdb.sql(sql).df())
                assert len(duck) == len(by_host)
                row += f" | DuckDB {duck_s:6.3f} s"
            pandas_s, grouped = best(lambda run=run: per_shard(run, pd))
            assert len(grouped) == len(by_host)
            row += f" | pandas per shard {pandas_s:6.3f} s"
            print(row, flush=True)


if __name__ == "__main__":
    main()
