"""Records a loop inside the test process, with a real Recorder and a real metric source address:
for tests that need the recorder's own numbers next to the loop's (shared by several test modules)."""

from __future__ import annotations

import time
from pathlib import Path

import tpu_perf
from tpu_perf.collectors import imports
from tpu_perf.collectors.session import Recorder, RecordOptions
from tpu_perf.store import RunWriter, load_run

INTERVAL_S = 0.1
"""The sampling interval of these recordings."""


def record_in_process(store: Path, addr: str, steps: int, step_s: float, *, during: object = None, batch_size: int | None = None) -> tuple[tpu_perf.Run, list[float]]:
    writer = RunWriter.create(str(store), {"name": "sampler-test", "status": "running"})
    options = RecordOptions(trace_steps=None, sample_interval_s=INTERVAL_S, tpu_metrics_addr=addr, batch_size=batch_size, progress=False)
    writer.update_manifest(config={"sample_interval_s": INTERVAL_S, "batch_size": batch_size})
    rec = Recorder(writer, options, log=lambda line: None)
    rec.start()
    durations = []
    for i in range(steps):
        t = time.perf_counter()
        tpu_perf.step(i)
        deadline = time.perf_counter() + step_s
        while time.perf_counter() < deadline:  # busy, like a loop dispatching work
            pass
        if during is not None:
            during(i)  # type: ignore[operator]
        durations.append(time.perf_counter() - t)
    rec.finish()
    imports.clear()  # the recorder registered a torch hook, as record() would clear it
    writer.finish("completed", 0, warnings=rec.warnings)
    return load_run(writer.url), durations
