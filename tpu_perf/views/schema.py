"""The JSON schema of `tpu-perf report --json`, generated from the report's types (a view: the
document is the analyzers' report plus the advisor's `advice`).

Each section's schema comes from its dataclass (msgspec's JSON-schema generator); the sections
whose JSON is reshaped (`MFU_LAYOUT`, `TRACE_LAYOUT`, `HOSTS_LAYOUT`) from the same layouts their
`to_dict` reads. docs/report-schema.json is this function's output, written by
`python -m tpu_perf.views.schema > docs/report-schema.json`; tests/test_one_answer.py fails
when the file and the types differ, and validates real reports against it.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec

from tpu_perf.advise.finding import Finding
from tpu_perf.analyzers.aot import AotStats
from tpu_perf.analyzers.compiles import CompileStats
from tpu_perf.analyzers.flops import FlopsStats
from tpu_perf.analyzers.hosts import HostsSection
from tpu_perf.analyzers.inference import InferenceStats
from tpu_perf.analyzers.layout import Layout
from tpu_perf.analyzers.memory import MemoryStats
from tpu_perf.analyzers.mfu import MFU_LAYOUT, MfuSummary
from tpu_perf.analyzers.programs import HloDoc
from tpu_perf.analyzers.report import HOSTS_LAYOUT, REPORT_VERSION
from tpu_perf.analyzers.runinfo import RunInfo
from tpu_perf.analyzers.runtime import RuntimeStats
from tpu_perf.analyzers.steps import StepStats
from tpu_perf.analyzers.torch_compile import TorchCompileStats
from tpu_perf.analyzers.traces import TRACE_LAYOUT, TraceFiles, TraceSection

REF = "#/$defs/{name}"
ALWAYS: tuple[str, ...] = ("report_version", "options", "run", "steps", "flops", "mfu", "mfu_basis", "mfu_detail", "memory", "program_hash", "inference")
"""Keys every report has, summary reports too (the dashboard's runs page reads those); the others are
in full reports (`report --json`), where they apply."""


class _Schemas:
    """Schemas of types, their shared definitions gathered in one `$defs`."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def of(self, kind: Any) -> dict[str, Any]:
        (schema,), defs = msgspec.json.schema_components([kind], ref_template=REF)
        self.defs.update(defs)
        return schema

    def layout(self, owner: type, layout: Layout) -> dict[str, dict[str, Any]]:
        """Properties of the object `layout` makes of an `owner`."""
        return {key: self.of(_type_at(owner, source)) if isinstance(source, str) else self.object(self.layout(owner, source)) for key, source in layout.items()}

    @staticmethod
    def object(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _type_at(owner: type, path: str) -> Any:
    """The annotated type at `path` (`"model.flops"`) of the dataclass `owner`."""
    kind: Any = owner
    for name in path.split("."):
        kind = typing.get_type_hints(kind)[name]
    return kind


def report_schema() -> dict[str, Any]:
    """The schema of `Report.to_dict()`: its top-level keys as `to_dict` writes them."""
    s = _Schemas()
    properties: dict[str, Any] = {
        "report_version": {"const": REPORT_VERSION},
        "options": s.object({"convention": s.of(str | None)}),
        "run": s.of(RunInfo),
        "steps": s.of(StepStats),
        "flops": s.of(FlopsStats),
        **s.layout(MfuSummary, MFU_LAYOUT),
        "compile": {"allOf": [s.of(CompileStats), {"type": "object", "properties": {"torch": s.of(TorchCompileStats | None)}, "required": ["torch"]}]},
        "memory": s.of(MemoryStats),
        "program_hash": {**s.of(str | None), "description": "The step program's identity: SHA-256 of its optimized HLO without metadata (exact.step_hlo_hash)."},
        "inference": {**s.of(InferenceStats | None), "description": "Generation requests (docs/inference.md); null for a run that served none."},
        "hlo": s.of(HloDoc),
        "programs": s.of(list[dict[str, Any]]),
        "trace": s.of(TraceFiles),
        **s.layout(TraceSection, TRACE_LAYOUT),
        "runtime": s.of(RuntimeStats),
        "aot": {"anyOf": [s.of(AotStats), s.of(list[AotStats]), {"type": "null"}], "description": "The step compiled for TPU slices: one object for one slice, a list for several, null for none."},
        **s.layout(HostsSection, HOSTS_LAYOUT),
        "advice": s.object({"top": s.of(list[Finding]), "also": s.of(list[Finding]), "conclusion": s.of(str | None), "nothing_left": s.of(bool)}),
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"tpu-perf report --json (report_version {REPORT_VERSION})",
        "description": "One run's analysis. docs/report-changelog.md lists what changed in each version.",
        "type": "object",
        "properties": properties,
        "required": list(ALWAYS),
        "additionalProperties": False,
        "$defs": dict(sorted(s.defs.items())),
    }


if __name__ == "__main__":
    print(json.dumps(report_schema(), indent=1, sort_keys=False))
