"""The report: every analyzer's answer for one run, as one frozen, typed document.

`build_report` calls the analyzers in one explicit order, handing each what it needs from the
earlier ones (no section reads another's keys), and `Report.to_dict()` is the one place the
document becomes JSON-shaped data (`tpu-perf report --json`, the dashboard's caches). Keys are
documented in the README ("report --json keys"); a key, once published, keeps its meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tpu_perf.analyzers.aot import AotStats, analyze_aot
from tpu_perf.analyzers.at_peak import step_at_peak
from tpu_perf.analyzers.compiles import CompileStats, analyze_compiles
from tpu_perf.analyzers.exact import step_hlo_hash
from tpu_perf.analyzers.flops import FlopsStats, analyze_flops
from tpu_perf.analyzers.hosts import HostsSection, analyze_hosts
from tpu_perf.analyzers.inference import InferenceStats, analyze_inference
from tpu_perf.analyzers.layout import Layout, reshaped
from tpu_perf.analyzers.memory import MemoryStats, analyze_memory
from tpu_perf.analyzers.mfu import MfuSummary, analyze_model_mfu, summarize_mfu
from tpu_perf.analyzers.out_of_memory import out_of_memory
from tpu_perf.analyzers.programs import HloSection, analyze_hlo_section
from tpu_perf.analyzers.runinfo import RunInfo, analyze_run_info
from tpu_perf.analyzers.runtime import RuntimeStats, analyze_runtime
from tpu_perf.analyzers.steps import StepStats, analyze_steps
from tpu_perf.analyzers.torch_compile import TorchCompileStats, analyze_torch_compile
from tpu_perf.analyzers.torch_state import torch_state
from tpu_perf.analyzers.traces import (
    TraceFiles,
    TraceSection,
    analyze_trace_files,
    analyze_trace_tables,
)
from tpu_perf.errors import DataError, TpuPerfError
from tpu_perf.jsonio import dumps, to_jsonable
from tpu_perf.store import Run

REPORT_VERSION = 4
"""4: `inference` added (generation requests: TTFT, TPOT, tokens/s, MBU; null for other runs).
3: `steps.step_s` is the one headline step time (basis `all-in` where the steady sample is too
small or leaves out too much); the iteration statistics are named `steps.iteration_*_s` (were
`median_s`, `mean_s`, `p10_s`, `p90_s`, `min_s`, `max_s`); `memory.peak_bytes` is the one peak;
`program_hash` added. docs/report-changelog.md lists every version's changes."""


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    convention: str | None
    """The model-FLOPs convention the MFU used (the run's own unless overridden)."""
    summary: bool = False
    """Only the summary parts (run, steps, flops, MFU, memory): what the runs page shows per run."""


@dataclass(frozen=True, kw_only=True)
class Report:
    """One run's analysis. Parts a summary report skips are None (and absent from `to_dict`)."""

    options: ReportOptions
    run: RunInfo
    steps: StepStats
    flops: FlopsStats
    mfu: MfuSummary
    memory: MemoryStats
    program_hash: str | None = None
    """The step program's identity (`exact.step_hlo_hash`): equal hashes, the same computation.
    `check`'s exact tier and the dashboard's op matching read this one."""
    inference: InferenceStats | None = None
    """Generation requests, their latencies, tokens/s and MBU; None for a run that served none."""
    compile: CompileStats | None = None
    torch_compile: TorchCompileStats | None = None
    hlo: HloSection | None = None
    trace: TraceFiles | None = None
    traces: TraceSection | None = None
    runtime: RuntimeStats | None = None
    aot: tuple[AotStats, ...] | None = None
    """The step compiled for TPU slices (`record --topology`), in the order they were named."""
    hosts: HostsSection | None = None
    """A multi-process job's processes and stragglers; None for a single process."""
    report_version: int = REPORT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The JSON-shaped document (NaN/inf as None), keys in their published order."""
        doc: dict[str, Any] = {"report_version": self.report_version, "options": {"convention": self.options.convention}, "run": self.run, "steps": self.steps, "flops": self.flops}
        doc.update(self.mfu.to_dict())
        if self.compile is not None:
            doc["compile"] = {**to_jsonable(self.compile), "torch": self.torch_compile}
        doc["memory"] = self.memory
        doc["program_hash"] = self.program_hash
        doc["inference"] = self.inference
        if self.hlo is not None:
            doc["hlo"] = self.hlo
            doc["programs"] = self.hlo.program_rows
        if self.trace is not None:
            doc["trace"] = self.trace
        if self.traces is not None:
            doc.update(self.traces.to_dict())
        if self.runtime is not None:
            doc["runtime"] = self.runtime
        if self.aot is not None:  # one object for one slice, a list for several, null for none
            doc["aot"] = None if not self.aot else self.aot[0] if len(self.aot) == 1 else list(self.aot)
        if self.hosts is not None:
            doc.update(reshaped(self.hosts, HOSTS_LAYOUT))
        return to_jsonable(doc)

    def to_json(self, *, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)


HOSTS_LAYOUT: Layout = {
    "job": {"processes": "processes", "missing": "missing", "steps_from": "steps_from", "note": "note"},
    "hosts": "hosts", "stragglers": "stragglers", "ops_spread": "ops_spread",
}
"""`HostsSection`'s keys in the report (top level, a multi-process job's report only)."""


def build_report(run: Run, *, convention: str | None = None, summary: bool = False) -> Report:
    """The report for `run`. `convention` overrides the model-FLOPs convention the run was recorded
    with; `summary` builds only the parts the runs page shows, with the same code and numbers."""
    recorded = (run.manifest.get("config") or {}).get("convention")
    options = ReportOptions(convention=convention or recorded, summary=summary)
    steps = _part(run, "steps", analyze_steps, run)
    flops = _part(run, "FLOPs", analyze_flops, run, steps)
    model = _part(run, "model MFU", analyze_model_mfu, run, steps, flops, convention=options.convention)
    mfu = summarize_mfu(model, flops)
    at_peak = _part(run, "memory at peak", step_at_peak, run)
    memory = _part(run, "memory", analyze_memory, run, at_peak=at_peak)
    base = {"options": options, "run": analyze_run_info(run), "steps": steps, "flops": flops, "mfu": mfu, "memory": memory, "program_hash": step_hlo_hash(run),
            "inference": _part(run, "inference", analyze_inference, run)}
    if summary:
        return Report(**base)
    base["memory"] = dataclasses.replace(memory, out_of_memory=out_of_memory(run, at_peak), torch_state=torch_state(run, memory.peak_bytes if memory.per_device else None))
    return Report(
        **base,
        compile=_part(run, "compile", analyze_compiles, run),
        torch_compile=_part(run, "torch.compile", analyze_torch_compile, run),
        hlo=_part(run, "HLO", analyze_hlo_section, run, chip=flops.chip),
        trace=analyze_trace_files(run),
        traces=_part(run, "trace", analyze_trace_tables, run, steps),
        runtime=_part(run, "runtime", analyze_runtime, run),
        aot=_part(run, "aot", analyze_aot, run, model_flops_per_step=model.model_flops_per_step),
        hosts=_part(run, "hosts", analyze_hosts, run),
    )


T = TypeVar("T")


def _part(run: Run, name: str, analyze: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """One analyzer's answer; a failure inside it becomes one line naming the run and the part
    (a DataError: exit 3), never a traceback. The run's files are left as they are."""
    try:
        return analyze(*args, **kwargs)
    except TpuPerfError:
        raise
    except Exception as exc:
        raise DataError(f"{run.url}: the {name} analysis failed ({type(exc).__name__}: {exc}); the run is kept as it is, please report this with the run folder") from exc
