"""`record()`: run a script under every collector that applies and leave a run folder behind."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tpu_perf.collectors import environment, forks, generation, imports, job
from tpu_perf.collectors.runner import Outcome, Target, run_target
from tpu_perf.collectors.session import Recorder, RecordOptions
from tpu_perf.git_state import git_state
from tpu_perf.store import RunWriter, layout

FRAMEWORK_COLLECTORS: dict[str, str] = {
    "jax": "tpu_perf.collectors.jax:install",
    "torch": "tpu_perf.collectors.torch:install",
}
"""Module the script imports -> `install(recorder, module) -> uninstall` of the collector for it."""


@dataclass
class RecordResult:
    run_id: str
    url: str
    outcome: Outcome
    warnings: list[str]
    topologies_failed: list[str]
    """`--topology` slices whose compile numbers are missing from the run (docs/aot.md)."""


def _installer(spec: str) -> Callable[[Recorder, ModuleType], Callable[[], None]]:
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def _trace_tables(writer: RunWriter, rec: Recorder) -> None:
    """ops/timeline/device_steps/devices from the run's own trace window; a failure only warns."""
    trace_dir = writer.dir / layout.TRACE_DIR
    if not trace_dir.exists() or not (any(trace_dir.rglob("*.xplane.pb")) or any(trace_dir.rglob("*.pt.trace.json*"))):
        return
    try:
        from tpu_perf.traces.ingest import read_traces, write_tables

        tables = read_traces(trace_dir)
        write_tables(writer, tables)
        if tables.clock_zero_s is not None:
            writer.update_manifest(trace_clock={"zero_s": tables.clock_zero_s, "source": tables.format})
    except Exception as exc:
        rec.warn(f"the trace window could not be turned into op tables ({type(exc).__name__}: {exc}); the trace files are kept")


def _manifest(target: Target, options: RecordOptions, *, name: str | None, tags: dict[str, str] | None) -> dict[str, Any]:
    """The first run.json of a script's run."""
    return base_manifest(
        options,
        name=name or (target.path.stem if target.path else str(target.module)),
        tags=tags,
        command=[target.display, *target.args],
        script=str(target.path) if target.path else None,
        module=target.module,
        source=target.path or Path.cwd(),
    )


def base_manifest(options: RecordOptions, *, name: str, tags: dict[str, str] | None, command: list[str], script: str | None, module: str | None, source: Path) -> dict[str, Any]:
    """The first run.json: what runs, where, with which versions and settings (`source`: where
    the git state is read)."""
    return {
        "name": name,
        "tags": tags or {},
        "status": "running",
        "exit_code": None,
        "command": command,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "script": script,
        "module": module,
        "started_at": time.time(),
        "pid": os.getpid(),
        "host": layout.hostname(),
        "git": git_state(source),
        "versions": environment.versions(),
        "env": environment.relevant_env(),
        "host_facts": environment.host_facts(),
        "config": {k: v for k, v in asdict(options).items() if k != "progress"},
        "frameworks": [],
        "hardware": {},
    }


def record(
    target: Target,
    *,
    store: str,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    options: RecordOptions | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    on_created: Callable[[RunWriter], None] | None = None,
) -> RecordResult:
    """Run `target` in this process while collectors write a run into `store`."""
    options = options or RecordOptions()
    manifest = _manifest(target, options, name=name, tags=tags)
    return record_call(lambda: run_target(target), manifest, store=store, options=options, log=log, on_created=on_created)


def record_call(
    run: Callable[[], Outcome],
    manifest: dict[str, Any],
    *,
    store: str,
    options: RecordOptions,
    log: Callable[[str], None],
    on_created: Callable[[RunWriter], None] | None = None,
    shard: str | None = None,
) -> RecordResult:
    """Call `run` (the script, or a spawned worker's function) in this process while collectors
    write a run with `manifest` into `store`. `shard`: this process's shard of a job whose id
    `TPU_PERF_RUN_ID` gives (a spawned worker: its index)."""
    with held_interrupt() as interrupted:  # a Ctrl-C while the run is set up: the run ends `interrupted`, not half made
        writer, rec, uninstalls = start_recording(manifest, store=store, options=options, log=log, on_created=on_created, shard=shard)
    outcome = Outcome("crashed", 1)
    try:
        outcome = Outcome("interrupted", 130, None, "KeyboardInterrupt (before the script started)") if interrupted else run()
    finally:
        if not rec.forked:  # a forked child ends here too: nothing of the run is its to write
            with held_interrupt() as again:
                url = finish_recording(writer, rec, outcome, uninstalls)
            if again and outcome.exit_code == 0:
                outcome = Outcome("interrupted", 130, None, "KeyboardInterrupt (while the run was saved)")
    if rec.forked:
        forks.end_child(outcome.exit_code)
    failed = [t for t in options.topologies if not (writer.dir / layout.aot_json(t)).exists()]
    spawned = writer.manifest.get("spawned")
    if spawned and outcome.status == "completed" and rec.steps.closed == 0:
        # the training ran in spawned workers, recorded as their job's run: this launcher's own
        # run holds no step, so the job's run stands for the command
        writer.discard()
        return RecordResult(spawned["job"], writer.job_url(spawned["job"]), outcome, rec.warnings, failed)
    return RecordResult(writer.run_id, url, outcome, rec.warnings, failed)


@contextlib.contextmanager
def held_interrupt() -> Iterator[list[int]]:
    """Hold a Ctrl-C (SIGINT) until the block ends, so that a run is never left half created or half
    saved; yields a list that holds the signal if one came. Outside the main thread, where no signal
    handler can be set, it holds nothing."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    try:
        old = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    except (ValueError, OSError):
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, old)


def start_recording(
    manifest: dict[str, Any],
    *,
    store: str,
    options: RecordOptions,
    log: Callable[[str], None],
    on_created: Callable[[RunWriter], None] | None = None,
    shard: str | None = None,
) -> tuple[RunWriter, Recorder, list[Callable[[], None]]]:
    """Create the run, hook the frameworks (now, or when first imported) and start the recorder.

    Returns the writer, the recorder and the collectors' undo functions, which `finish_recording`
    takes back (`record_call` for a script, `tpu_perf.record` for a block of a notebook)."""
    job_id, start_shard = job.start_shard()
    member = job.from_environment()
    if job_id is not None:
        manifest["id"] = job_id
        if member is not None:
            manifest.update(process_index=member.process_index, process_count=member.process_count, joined_by=member.framework)
    writer = RunWriter.create(store, manifest, shard=shard if (job_id is not None and shard is not None) else start_shard)
    if on_created is not None:
        on_created(writer)
    rec = Recorder(writer, options, log=log)
    if job_id is not None and member is not None:
        rec.process_index = member.process_index
    uninstalls: list[Callable[[], None]] = []

    def hook(framework: str, spec: str) -> Callable[[ModuleType], None]:
        def install(module: ModuleType) -> None:
            try:
                uninstalls.append(_installer(spec)(rec, module))
                writer.update_manifest(frameworks=sorted({*writer.manifest.get("frameworks", []), framework}))
            except Exception as exc:
                rec.warn(f"the {framework} collector could not be installed ({type(exc).__name__}: {exc}); recording without it")

        return install

    for framework, spec in FRAMEWORK_COLLECTORS.items():
        imports.when_imported(framework, hook(framework, spec))
    uninstalls.append(generation.install(rec))
    rec.start()
    return writer, rec, uninstalls


def _end_warnings(rec: Recorder) -> None:
    """Say what the run lacks when the script did less than the options assumed."""
    steps = rec.steps.closed
    if steps == 0 and rec.generation is not None and rec.generation.requests:
        return  # an inference run: its requests are its unit of work (analyzers/inference.py)
    if steps == 0 and not any("step" in w for w in rec.warnings):
        rec.warn("no training steps were recorded: the script ran no jitted function twice and no optimizer step; mark steps with tpu_perf.step() if it trains")
    window = rec.options.trace_steps
    if window is not None and 0 < steps <= window[0] and not (rec.trace is not None and rec.trace.done):
        rec.warn(f"no trace window: --trace-steps {window[0]}:{window[1]} starts after the last step ({steps} steps ran); pass a window inside the run")


def finish_recording(writer: RunWriter, rec: Recorder, outcome: Outcome, uninstalls: list[Callable[[], None]]) -> str:
    """End of the script (or the recorded block) in the recording process: finalise, undo the
    hooks, write the manifest with the outcome's status; returns the run's URL."""
    imports.clear()
    try:
        rec.finish()
        _end_warnings(rec)
        try:
            _trace_tables(writer, rec)
        except KeyboardInterrupt:  # a second Ctrl-C while the trace is read: say so, finish the run
            rec.warn("interrupted while the trace window was turned into op tables: ops, timeline and device tables are missing; the trace files are kept (`tpu-perf import RUN_FOLDER/trace` reads them)")
    finally:
        for undo in reversed(uninstalls):
            undo()
        failed = [t for t in rec.options.topologies if not (writer.dir / layout.aot_json(t)).exists()]
        if failed and "jax" not in writer.manifest.get("frameworks", []):
            rec.warn(f"--topology {' '.join(failed)}: the script imported no jax; TPU compile numbers are for JAX steps (docs/aot.md)")
        fields = {"warnings": rec.warnings, "step_source": rec.steps.source}
        if outcome.traceback:
            writer.write_text(layout.TRACEBACK, outcome.traceback)
            fields["error"] = {"message": outcome.error, "traceback_file": layout.TRACEBACK}
        elif outcome.error:
            fields["error"] = {"message": outcome.error}
        url = writer.finish(outcome.status, outcome.exit_code, **fields)
        rec.warnings.extend(p for p in writer.problems if p not in rec.warnings)  # what could not be written, said with the rest
    return url
