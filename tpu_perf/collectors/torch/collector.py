"""Hooks PyTorch for one recording: optimizer and profiler steps, device sync, FLOPs of one step,
Dynamo and torch-tpu compilation, the trace window and hardware facts. Device memory (torch.cuda /
torch.accelerator allocator stats per device) is sampled by the runtime sampler's torch source.

Installed when the script imports torch (tpu-perf never imports torch itself); everything is undone
by the returned `uninstall`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from tpu_perf.collectors.session import Recorder
from tpu_perf.collectors.torch import device, distributed, spawned, state_bytes
from tpu_perf.collectors.torch.compiles import DynamoCompiles, tpu_cache_stats
from tpu_perf.collectors.torch.flops import FlopWindow
from tpu_perf.collectors.torch.interleaved import patch_interleaved
from tpu_perf.collectors.torch.script_profiler import ScriptProfilers
from tpu_perf.collectors.torch.steps import SOURCE, OptimizerSteps, patch_profiler
from tpu_perf.collectors.torch.syncs import HostSyncs
from tpu_perf.collectors.torch.token_loop import TokenLoop
from tpu_perf.collectors.torch.trace import TorchTrace
from tpu_perf.store import layout

NO_STEPS_HINT = (
    "no training steps were seen: steps of torch.optim optimizers (or, with none, backward() calls) are found automatically, but "
    "torch-tpu's own optimizers (torch.tpu.optimizers, SingleTraceTrainer) and optimizer steps inside "
    "torch.compile are not; call tpu_perf.step() at the start of each training step (or use "
    "torch.profiler's prof.step())"
)


class TorchCollector:
    """The state of one recording of a torch script."""

    def __init__(self, rec: Recorder, torch: Any) -> None:
        self.rec = rec
        self.torch = torch
        self.device_type: str | None = None
        self._device_known = False
        self._hardware_written = False
        self._device_sync: Callable[[], None] | None = None
        self.flops = FlopWindow(rec, torch)
        self.steps = OptimizerSteps(rec, torch, self.set_device, self.flops.retry)
        self.dynamo = DynamoCompiles(rec)
        self.syncs = HostSyncs(torch)
        self.token_loop = TokenLoop(rec, torch)

    # -- device ---------------------------------------------------------------------------------
    def set_device(self, device_type: str | None) -> None:
        """The device the script trains on: fixes the sync and the memory series."""
        if self._device_known:
            return
        self._device_known = True
        self.device_type = device_type or device.accelerator_type(self.torch)
        self._device_sync = device.sync_for(self.torch, self.device_type)

    def sync(self) -> None:
        self.dynamo.drain()
        if self._device_sync is not None:
            self._device_sync()

    def on_boundary(self, index: int) -> None:
        if not self._device_known:
            self.set_device(None)
        if not self._hardware_written:
            self._hardware_written = True
            if not self.rec.writer.manifest.get("hardware"):  # a JAX collector may have said it already
                self.rec.writer.update_manifest(hardware=device.hardware(self.torch, self.device_type))
        self.flops.on_boundary(index)

    # -- end of the script ----------------------------------------------------------------------
    def before_close(self) -> None:
        self.flops.close()
        self.steps.close()
        self.token_loop.close(trained=self.rec.steps.source is not None or self.steps.steps_seen > 0)
        serving = self.rec.generation is not None and self.rec.generation.requests > 0  # an inference run has requests, not steps
        if self.rec.steps.source is None and self.steps.steps_seen == 0 and not serving:
            self.rec.warn(NO_STEPS_HINT)

    def finalize(self) -> None:
        facts: dict[str, Any] = {"version": str(self.torch.__version__), "device_type": self.device_type, "optimizer_steps": self.steps.steps_seen, "optimizers_per_step": self.steps.cycle.describe()}
        dynamo = self.dynamo.summary()
        if dynamo is not None:
            facts["dynamo"] = dynamo
        cache = tpu_cache_stats(self.torch) if self.device_type == "tpu" else None
        if cache is not None:
            facts["tpu_compile_cache"] = cache
        syncs = self.syncs.summary(self.rec.steps.closed)
        if syncs is not None:
            facts["syncs"] = syncs
        self.rec.writer.update_manifest(torch=facts)
        micro = self.steps.micro_batches() if self.rec.steps.source == SOURCE else None
        if micro is not None:
            self.rec.writer.update_manifest(accumulation={"micro_batches": micro, "by": "backward", "note": self.steps.uneven_note()})
        if self.flops.row:
            self._write_program(self.flops.row)

    def _write_program(self, row: dict[str, Any]) -> None:
        """Add the step's row to programs.parquet, keeping rows another collector wrote."""
        path = Path(self.rec.writer.dir) / layout.parquet_name("programs")
        frame = pd.DataFrame([row])
        if path.exists():
            frame = pd.concat([pd.read_parquet(path), frame], ignore_index=True)
        self.rec.writer.write_table("programs", frame)


def install(rec: Recorder, torch: ModuleType) -> Callable[[], None]:
    """Hook `torch` (already imported by the script) into `rec`; returns the undo function."""
    collector = TorchCollector(rec, torch)
    collector.steps.install()
    collector.token_loop.install()
    script = ScriptProfilers(rec)
    undo_profiler = patch_profiler(rec, torch, script)
    undo_interleaved = patch_interleaved(rec, torch)
    undo_distributed = distributed.install(rec, torch)
    undo_spawned = spawned.install(rec, torch)
    undo_syncs = collector.syncs.install()
    rec.on_boundary(collector.syncs.on_boundary)
    undo_state_bytes = state_bytes.install(rec, torch)
    rec.add_sync(collector.sync)
    rec.on_boundary(collector.on_boundary)
    rec.offer_trace(TorchTrace(torch, lambda: Path(rec.writer.dir) / layout.TRACE_DIR, lambda: collector.device_type, script.check).control())
    rec.add_before_close(collector.before_close)
    rec.add_finalizer(collector.finalize)

    def uninstall() -> None:
        collector.steps.uninstall()
        collector.token_loop.uninstall()
        undo_profiler()
        undo_interleaved()
        undo_distributed()
        undo_spawned()
        undo_syncs()
        undo_state_bytes()

    return uninstall
