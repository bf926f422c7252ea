"""The report document: every analyzer's answer for one run, as plain JSON-able data.

`tpu-perf report --json` prints it; the terminal view and the dashboard render it. Sections are
registered functions so each analyzer family adds its part without touching the others. Keys are
documented in the README ("report --json keys"); a key, once published, keeps its meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from tpu_perf.analyzers.compiles import analyze_compiles
from tpu_perf.analyzers.flops import analyze_flops
from tpu_perf.analyzers.memory import analyze_memory
from tpu_perf.analyzers.mfu import analyze_model_mfu
from tpu_perf.analyzers.programs import analyze_fusion
from tpu_perf.analyzers.steps import analyze_steps
from tpu_perf.store import Run

REPORT_VERSION = 1

Section = Callable[[Run, dict[str, Any]], None]
"""Adds keys to the document; it sees what earlier sections wrote."""

SECTIONS: list[Section] = []


def section(fn: Section) -> Section:
    SECTIONS.append(fn)
    return fn


@section
def _run(run: Run, doc: dict[str, Any]) -> None:
    m = run.manifest
    doc["run"] = {
        "id": run.id,
        "name": run.name,
        "url": run.url,
        "status": run.status,
        "exit_code": m.get("exit_code"),
        "started_at": m.get("started_at"),
        "ended_at": m.get("ended_at"),
        "command": m.get("command"),
        "tags": run.tags,
        "frameworks": m.get("frameworks") or [],
        "hardware": m.get("hardware") or {},
        "git": m.get("git"),
        "error": (m.get("error") or {}).get("message"),
        "warnings": m.get("warnings") or [],
    }


@section
def _steps(run: Run, doc: dict[str, Any]) -> None:
    stats = analyze_steps(run)
    doc["steps"] = asdict(stats)
    stats_f = analyze_flops(run, stats)
    doc["flops"] = asdict(stats_f)
    model = analyze_model_mfu(run, stats, stats_f, convention=(doc.get("options") or {}).get("convention"))
    basis = "model_flops" if model.mfu_per_device is not None else "hardware_flops" if stats_f.utilization is not None else None
    doc["mfu"] = model.mfu_per_device if basis == "model_flops" else stats_f.utilization
    doc["mfu_basis"] = basis
    doc["mfu_detail"] = {**asdict(model), "basis": basis, "hardware_utilization": stats_f.utilization}


@section
def _compile(run: Run, doc: dict[str, Any]) -> None:
    stats = analyze_compiles(run)
    doc["compile"] = {**asdict(stats), "slowest": [{"function": f, "duration_s": d} for f, d in stats.slowest]}


@section
def _memory(run: Run, doc: dict[str, Any]) -> None:
    doc["memory"] = asdict(analyze_memory(run))


@section
def _hlo(run: Run, doc: dict[str, Any]) -> None:
    fusion = analyze_fusion(run)
    step = next((p for p in fusion if p.is_step), fusion[0] if fusion else None)
    doc["hlo"] = {
        "fusions": step.summary.fusions if step else None,
        "fusions_by_kind": step.summary.fusions_by_kind if step else {},
        "top_level_instructions": step.summary.top_level_instructions if step else None,
        "programs": [p.to_dict() for p in fusion],
    }
    programs = run.programs
    doc["programs"] = programs.astype(object).where(programs.notna(), None).to_dict("records") if not programs.empty else []


@section
def _trace(run: Run, doc: dict[str, Any]) -> None:
    files = run.list_files("trace")
    logdir = run.file_path("trace") if files else None
    doc["trace"] = {"files": files, "logdir": logdir}


import tpu_perf.analyzers.traces  # noqa: E402,F401  (registers the trace sections)

SUMMARY_SECTIONS: tuple[Section, ...] = (_run, _steps, _memory)
"""The sections behind a run's one-line summary (`run`, `steps`, `flops`, `mfu*`, `memory`): what
the dashboard's runs page shows for every run of a store, without the trace, HLO and runtime work."""


def build_report(run: Run, sections: Iterable[Section] | None = None, *, convention: str | None = None) -> dict[str, Any]:
    """The whole report for `run`: a dict of plain values (None where a number is unknown).

    `sections` (a subset of SECTIONS) builds only those keys, with the same code and numbers.
    `convention` overrides the model-FLOPs convention the run was recorded with; the document says
    which one it used under `options`."""
    recorded = (run.manifest.get("config") or {}).get("convention")
    doc: dict[str, Any] = {"report_version": REPORT_VERSION, "options": {"convention": convention or recorded}}
    for fn in SECTIONS if sections is None else [fn for fn in SECTIONS if fn in set(sections)]:
        fn(run, doc)
    return doc


import tpu_perf.analyzers.runtime  # noqa: E402, F401  (registers the `runtime` section)
from tpu_perf.analyzers import torch_compile as _torch_compile  # noqa: E402,F401  (adds `compile.torch`; after `_compile`)
from tpu_perf.analyzers.aot import aot_section as _aot_section  # noqa: E402  (the `aot` key: record --topology)

SECTIONS.append(_aot_section)
