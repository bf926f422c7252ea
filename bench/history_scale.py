"""History scale: a store of 10,000 runs; time `tpu-perf ls` and `tpu-perf history` on it.

    PYTHONPATH=. python bench/history_scale.py [--runs 10000] [--store DIR] [--template RUN_DIR]

The store is synthetic but shaped by a real recording: examples/jax_mlp.py is recorded once (JAX on
CPU) and every run is a copy of its folder (run.json with its own id, start, name and tags; its
tables hard-linked), plus the index row that run would have written when it ended: the template's
real row (`index_row`) with the run's own id, tags and a step time drawn around the template's
(a nightly series: 50 names x 200 commits), in the run's folder (`index.parquet`), as runs ending
in CI write them.

Measured (wall time, seconds; the budget is 2 s for `ls` and `history`):
- first read: every run's row file is read once and compacted into one part;
- `ls --json` and `history` as the CLI (a fresh process each time, as CI runs them; Python's start
  and imports included) and in-process (`load_index`, `build_history`);
- after 20 more runs ended (20 new row files), the same again;
- rebuilding rows for runs that have none (older runs): seconds per run;
- reading the index with pyarrow (what tpu-perf uses) against DuckDB's read_parquet: 1000 row files, and the compacted part.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BUDGET_S = 2.0
ROOT = Path(__file__).resolve().parents[1]


def record_template(folder: Path) -> Path:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "tpu_perf", "record", "--store", str(folder), "-q", "--no-trace", "--tokens-per-step", "4096", str(ROOT / "examples" / "jax_mlp.py"), "--steps", "20", "--width", "256"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    (run,) = [p for p in folder.iterdir() if (p / "run.json").exists()]
    return run


def build_store(store: Path, template: Path, runs: int, *, with_rows: bool = True, offset: int = 0) -> list[str]:
    from tpu_perf.analyzers.index_row import index_row
    from tpu_perf.store import load_run
    from tpu_perf.store.index import ROW_FILE, _to_bytes

    manifest = json.loads((template / "run.json").read_text())
    row = index_row(load_run(str(template)))
    tables = [p for p in template.iterdir() if p.is_file() and p.suffix == ".parquet" and p.name != ROW_FILE]  # each run its own row
    rng = np.random.default_rng(0)
    start = time.time() - runs * 600.0
    ids = []
    for i in range(offset, offset + runs):
        run_id = f"2026{i:06d}-000000-{i:06x}"
        folder = store / run_id
        folder.mkdir(parents=True)
        name, commit = f"nightly-{i % 50:02d}", f"c{i // 50:04d}"
        started = start + 600.0 * i
        (folder / "run.json").write_text(json.dumps({**manifest, "id": run_id, "name": name, "tags": {"commit": commit}, "started_at": started, "ended_at": started + 60}))
        for table in tables:
            os.link(table, folder / table.name)
        if with_rows:  # the file write_row writes, without its fsync (the bench times reading)
            step = row["step_s"] * (1 + 0.02 * rng.standard_normal()) * (1.15 if i // 50 >= 120 else 1.0)
            (folder / ROW_FILE).write_bytes(_to_bytes([{**row, "id": run_id, "name": name, "tags": json.dumps({"commit": commit}), "started_at": started, "ended_at": started + 60, "step_s": step, "indexed_at": time.time()}]))
        ids.append(run_id)
    return ids


CPU: dict[str, float] = {}
"""CPU seconds of the last measurement (this machine may be shared: wall time then includes waits)."""


def cli(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", *args], env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"tpu-perf {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return elapsed, proc


def in_process(store: Path) -> tuple[float, float]:
    from tpu_perf.analyzers.history import build_history
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.commands.history import select_rows

    t, cpu = time.perf_counter(), time.process_time()
    rows = load_index(str(store))
    listed = time.perf_counter() - t
    CPU["listed"] = time.process_time() - cpu
    build_history(select_rows(rows, ["name:nightly-07"]), metric="step_time", order_by="tag:commit")
    CPU["last"] = time.process_time() - cpu
    return listed, time.perf_counter() - t


def line(label: str, seconds: float, budget: float | None = BUDGET_S, cpu: float | None = None) -> None:
    ratio = f"  ({seconds / budget:.2f} of the {budget:g} s budget)" if budget else ""
    used = f", CPU {cpu:.3f} s" if cpu is not None else ""
    print(f"{label:70} {seconds:8.3f} s{used}{ratio}", flush=True)


def compare_readers(store: Path, pattern: str) -> None:
    import pyarrow.parquet as pq

    files = sorted(store.glob(pattern))
    t = time.perf_counter()
    rows = sum(pq.ParquetFile(str(f), pre_buffer=False).read(use_threads=False).num_rows for f in files)
    line(f"pyarrow: read {rows} rows ({len(files)} file(s))", time.perf_counter() - t, None)
    try:
        import duckdb
    except ImportError:
        print("(duckdb not installed: not compared)")
        return
    t = time.perf_counter()
    con = duckdb.connect()
    got = con.execute(f"select * from read_parquet('{store}/{pattern}', union_by_name=true)").fetchall()
    line(f"duckdb:  read {len(got)} rows (same files)", time.perf_counter() - t, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--template", type=Path, default=None, help="A recorded run folder to copy (default: record examples/jax_mlp.py).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tpu-perf-history-"))
    store = args.store or work / "store"
    try:
        template = args.template or record_template(work / "template")
        t = time.perf_counter()
        build_store(store, template, args.runs)
        print(f"store: {args.runs} runs written in {time.perf_counter() - t:.1f} s (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
        sample = work / "sample"  # 1000 loose rows: what a store holds when nothing read it for 1000 runs
        build_store(sample, template, 1000)
        compare_readers(sample, "*/index.parquet")
        shutil.rmtree(sample)
        line("first read (row files compacted), in-process load_index", in_process(store)[0], cpu=CPU["listed"])
        compare_readers(store, ".index/part-*.parquet")
        for label in ("compacted", "after 20 more runs ended"):
            if label != "compacted":
                more = build_store(work / "more", template, 20, offset=args.runs)
                for run_id in more:
                    shutil.move(str(work / "more" / run_id), store / run_id)
            listed, both = in_process(store)
            line(f"{label}: in-process load_index", listed, cpu=CPU["listed"])
            line(f"{label}: in-process load_index + build_history (1 of 50 series)", both, cpu=CPU["last"])
            line(f"{label}: CLI ls --json", cli("ls", "--json", "--store", str(store))[0], cpu=CPU["last"])
            seconds, proc = cli("history", "name:nightly-07", "--store", str(store), "--order-by", "tag:commit", "--json")
            found = [(c["at"], round(c["change"], 3)) for c in json.loads(proc.stdout)["change_points"]]
            line(f"{label}: CLI history name:nightly-07 --order-by tag:commit", seconds, cpu=CPU["last"])
            print(f"{'':62} change points: {found} (the bench's step is at c0120, +15 %)")
        seconds, _ = cli("--help")
        line("CLI start alone (tpu-perf --help)", seconds, None, cpu=CPU["last"])
        rebuild = work / "rebuild"
        build_store(rebuild, template, 200, with_rows=False)
        t = time.perf_counter()
        in_process(rebuild)
        print(f"rebuild: 200 runs without rows: {time.perf_counter() - t:.2f} s ({(time.perf_counter() - t) / 200 * 1e3:.0f} ms a run, once)")
    finally:
        if args.store is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
