"""The run store on its own: layout, atomic manifest, statuses, fsspec URLs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import fsspec
import pandas as pd
import pytest

from tests.conftest import ROOT
from tpu_perf.collectors.record import record
from tpu_perf.collectors.runner import resolve_target
from tpu_perf.collectors.session import RecordOptions
from tpu_perf.errors import DataError
from tpu_perf.store import RunWriter, effective_status, layout, list_runs, load_run


def test_append_compact_and_read_back(tmp_path: Path) -> None:
    writer = RunWriter.create(str(tmp_path), {"name": "unit", "started_at": time.time(), "pid": os.getpid(), "host": layout.hostname()})
    for i in range(5):
        writer.append("steps", {"step": i, "duration_s": 0.1 * (i + 1), "source": "explicit"})
    writer.flush()
    live = load_run(writer.dir)
    assert live.status == "running"
    assert live.steps["step"].tolist() == [0, 1, 2, 3, 4]
    writer.finish("completed", 0)
    done = load_run(writer.run_id, store=str(tmp_path))
    assert done.status == "completed" and done.manifest["schema_version"] == layout.SCHEMA_VERSION
    assert done.steps["duration_s"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert sorted(p.name for p in writer.dir.iterdir()) == ["run.json", "steps.parquet"]
    assert pd.read_parquet(writer.dir / "steps.parquet").shape == (5, 3)  # plain pandas reads it too


def test_status_of_a_dead_or_silent_recorder_is_crashed() -> None:
    now = time.time()
    base = {"status": "running", "host": layout.hostname(), "heartbeat_at": now}
    dead = subprocessed_pid()
    assert effective_status({**base, "pid": os.getpid()}, now) == "running"
    assert effective_status({**base, "pid": dead}, now) == "crashed"
    other_host = {**base, "host": "elsewhere", "pid": 1}
    assert effective_status(other_host, now + layout.STALE_HEARTBEAT_S - 1) == "running"
    assert effective_status(other_host, now + layout.STALE_HEARTBEAT_S + 1) == "crashed"
    assert effective_status({"status": "completed"}, now) == "completed"


def subprocessed_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_record_into_an_fsspec_memory_store() -> None:
    store = "memory://tpu-perf-test-store"
    script = ROOT / "examples" / "jax_mlp.py"
    result = record(resolve_target(str(script), None, ["--steps", "6", "--width", "64"]), store=store, options=RecordOptions(trace_steps=(2, 4), progress=False))
    assert result.url.startswith("memory://") and result.url.endswith(f"tpu-perf-test-store/{result.run_id}")
    assert load_run(result.url).id == result.run_id
    run = load_run(result.run_id, store=store)
    assert run.status == "completed" and len(run.steps) == 6
    assert any(f.endswith(".xplane.pb") for f in run.list_files("trace"))
    assert [r.id for r in list_runs(store)] == [result.run_id]
    fs = fsspec.filesystem("memory")
    assert fs.exists(f"/tpu-perf-test-store/{result.run_id}/steps.parquet")
    fs.rm("/tpu-perf-test-store", recursive=True)


def test_importing_tpu_perf_loads_no_heavy_module() -> None:
    import subprocess
    import sys

    code = "import sys, tpu_perf; tpu_perf.step(); print(sorted(m for m in ('pandas', 'pyarrow', 'jax', 'torch', 'fsspec') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_a_table_is_read_once_per_loaded_run_as_pandas_reads_it(tmp_path: Path) -> None:
    writer = RunWriter.create(str(tmp_path), {"name": "once", "started_at": time.time()})
    writer.write_table("steps", pd.DataFrame({"step": [0, 1, 2], "duration_s": [0.5, 0.1, None], "source": ["auto:f", "auto:f", None], "step_num": None}))
    writer.finish("completed", 0)
    path = writer.dir / "steps.parquet"
    run = load_run(writer.dir)
    steps = run.table("steps")
    pd.testing.assert_frame_equal(steps, pd.read_parquet(path), check_exact=True)  # same frame, same dtypes
    path.write_bytes(b"not parquet any more")
    assert run.table("steps") is steps  # kept: not read again by every analyzer that asks for it
    with pytest.raises(DataError, match="steps.parquet: cannot be read"):
        load_run(writer.dir).table("steps")  # a new load reads the file again, and names it


def test_reading_a_run_starts_no_arrow_thread_pool(tmp_path: Path) -> None:
    """Arrow's pool threads, alive when the interpreter exits, sometimes abort a finished `tpu-perf
    report` with exit -6 (apache/arrow#34314): reading a run must not start them."""
    import subprocess
    import sys

    writer = RunWriter.create(str(tmp_path), {"name": "threads", "started_at": time.time()})
    n = 20_000
    writer.write_table("ops", pd.DataFrame({"name": [f"fusion.{i % 300}" for i in range(n)], "device": "tpu:0", "duration_s": [i * 1e-6 for i in range(n)]}))
    writer.finish("completed", 0)
    code = (
        "import os, sys; from tpu_perf.store import load_run\n"
        "tasks = lambda: len(os.listdir('/proc/self/task'))\n"
        "run = load_run(sys.argv[1]); before = tasks()\n"
        "ops = run.table('ops'); print(before, tasks(), len(ops))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(writer.dir)], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    assert out[2] == str(n) and out[0] == out[1], f"reading ops.parquet started {int(out[1]) - int(out[0])} native threads"
