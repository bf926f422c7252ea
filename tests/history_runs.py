"""Cheap real runs for history tests: a framework-free loop of `tpu_perf.step()` and `time.sleep`,
recorded in this process by a real Recorder into real run folders, whose index rows are written
as `tpu-perf record` writes them when a run ends."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import tpu_perf
from tpu_perf.analyzers.index_row import write_index_row
from tpu_perf.collectors import imports
from tpu_perf.collectors.session import Recorder, RecordOptions
from tpu_perf.store import RunWriter, load_run


def record_sleep_loop(store: Path, step_s: float, *, steps: int = 8, tags: Mapping[str, str] | None = None, name: str = "nightly", manifest: Mapping[str, object] | None = None) -> str:
    """One run of `steps` steps sleeping `step_s` each; returns its id."""
    writer = RunWriter.create(str(store), {"name": name, "status": "running", "tags": dict(tags or {}), "started_at": time.time(), **dict(manifest or {})})
    options = RecordOptions(trace_steps=None, sample_interval_s=1.0, tpu_metrics_addr="127.0.0.1:1", progress=False)
    rec = Recorder(writer, options, log=lambda line: None)
    rec.start()
    for i in range(steps):
        tpu_perf.step(i)
        time.sleep(step_s)
    tpu_perf.step(steps)  # ends the last timed step
    rec.finish()
    imports.clear()
    writer.finish("completed", 0, warnings=rec.warnings)
    write_index_row(load_run(writer.url), str(store))
    return writer.run_id


CPU_SHARE = 0.8
"""Each written step's process CPU time (`cpu_s`), as a share of its duration: a step that computes."""


def write_run(store: Path, durations: list[float], *, tags: Mapping[str, str] | None = None, name: str = "nightly", manifest: Mapping[str, object] | None = None, started_at: float | None = None, index: bool = True) -> str:
    """A run folder written through the store writer with these step durations (the first step
    compiles), as a recording writes it: steps appended while live, compacted at the end. For
    series whose noise the test controls (a loaded CI machine's sleep is not 3 % noise)."""
    start = time.time() if started_at is None else started_at
    writer = RunWriter.create(str(store), {"name": name, "status": "running", "tags": dict(tags or {}), "started_at": start, "frameworks": [], **dict(manifest or {})})
    t = start
    for i, d in enumerate(durations):
        writer.append("steps", {"step": i, "step_num": i, "start_time_s": t, "end_time_s": t + d, "duration_s": d, "cpu_s": CPU_SHARE * d, "device_s": None, "wait_s": None, "compiled": i == 0, "compile_s": 0, "traced": False, "instrumented": False, "tail": False, "interleaved": False, "source": "explicit", "host": "test", "process_index": 0})
        t += d
    writer.finish("completed", 0, warnings=[])
    if index:
        write_index_row(load_run(writer.url), str(store))
    return writer.run_id


def write_series(store: Path, levels: list[float], *, noise: float, seed: int, tag: str = "commit", steps: int = 12, manifest: Mapping[str, object] | None = None) -> list[str]:
    """One run per level, tagged commit=c01, c02, ...: each run's steps are its level times one
    run-to-run factor (1 + noise * z) and a small within-run jitter (0.5 %), so a run's median
    step sits `noise` from its level. Returns the run ids in order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = []
    base = time.time() - 86400.0 * len(levels)
    for i, level in enumerate(levels, 1):
        run_level = level * (1 + noise * rng.standard_normal())
        durations = [run_level * 3] + list(run_level * (1 + 0.005 * rng.standard_normal(steps - 1)))
        ids.append(write_run(store, durations, tags={tag: f"c{i:02d}"}, started_at=base + 86400.0 * i, manifest=manifest))
    return ids
