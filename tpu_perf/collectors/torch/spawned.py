"""Workers started with `torch.multiprocessing.spawn` (PyTorch's DDP tutorial) are recorded too.

A spawned worker is a fresh interpreter that runs only the function it was given, so the
launcher's hooks do not reach it. tpu-perf hands the worker a wrapped function instead
(`RecordedWorker`, pickled by reference like the original): in the worker it records the call as
its shard of one job (`TPU_PERF_RUN_ID` = an id chosen by the launcher), which the worker's own
`init_process_group` then files under its rank (collectors/job.py). The launcher's run holds no
step of its own; when it ends well it gives way to the job's run (collectors/record.py).
"""

from __future__ import annotations

import functools
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_perf.collectors.session import Recorder, RecordOptions
from tpu_perf.store import layout

START_METHODS = ("spawn", "forkserver")
"""Start methods whose workers begin as fresh interpreters; a forked worker is a copy of the
launcher, recorded by nobody (collectors/forks.py)."""

WORKER_MANIFEST_DROP = ("id", "pid", "started_at", "status", "exit_code", "frameworks", "hardware", "spawned", "warnings", "heartbeat_at", "process_index", "process_count", "joined_by")


@dataclass(frozen=True)
class RecordedWorker:
    """The function a spawned worker runs, recorded as shard `index` of job `job_id`."""

    fn: Callable[..., Any]
    job_id: str
    store: str
    options: RecordOptions
    manifest: dict[str, Any]

    def __call__(self, index: int, *args: Any) -> Any:
        from tpu_perf.collectors.record import record_call
        from tpu_perf.collectors.runner import Outcome

        os.environ[layout.RUN_ID_ENV] = self.job_id
        raised: list[BaseException] = []
        result: list[Any] = []

        def run() -> Outcome:
            try:
                result.append(self.fn(index, *args))
                return Outcome("completed", 0)
            except BaseException as exc:  # recorded, then raised for the launcher to see
                raised.append(exc)
                return Outcome("failed", 1, traceback.format_exc(), f"{type(exc).__name__}: {exc}")

        manifest = {**self.manifest, "pid": os.getpid(), "started_at": time.time(), "host": layout.hostname(), "spawned_index": index}
        record_call(run, manifest, store=self.store, options=self.options, log=lambda line: print(line, file=sys.stderr), shard=str(index))
        if raised:
            raise raised[0]
        return result[0] if result else None


def install(rec: Recorder, torch: Any) -> Callable[[], None]:
    """Wrap `torch.multiprocessing.start_processes` (which `spawn` calls); returns the undo."""
    module = sys.modules["torch.multiprocessing.spawn"]
    original = module.start_processes

    @functools.wraps(original)
    def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1, join: bool = True, daemon: bool = False, start_method: str = "spawn") -> Any:
        if start_method in START_METHODS and not isinstance(fn, RecordedWorker):
            job_id = layout.new_run_id()
            manifest = {k: v for k, v in rec.writer.manifest.items() if k not in WORKER_MANIFEST_DROP}
            fn = RecordedWorker(fn, job_id, rec.writer.store, rec.options, manifest)
            rec.writer.update_manifest(spawned={"job": job_id, "workers": nprocs, "start_method": start_method})
            rec.log(f"tpu-perf: recording {nprocs} spawned worker(s) as job run {job_id}")
            rec.warn(f"the training ran in {nprocs} worker(s) started by torch.multiprocessing, recorded as job run {job_id}: see `tpu-perf report {job_id}`")
        elif start_method not in START_METHODS:
            rec.warn(f"torch.multiprocessing started {nprocs} worker(s) with start_method={start_method!r}: forked workers are not recorded; use 'spawn', or run each worker under tpu-perf record")
        return original(fn, args, nprocs, join, daemon, start_method)

    module.start_processes = start_processes
    exported = torch.multiprocessing.start_processes is original
    if exported:
        torch.multiprocessing.start_processes = start_processes

    def undo() -> None:
        module.start_processes = original
        if exported:
            torch.multiprocessing.start_processes = original

    return undo
