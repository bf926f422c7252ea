"""Fusion summaries of the programs whose optimized HLO a run saved, and the report's `hlo` part."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pandas as pd

from tpu_perf.analyzers.hlo import FusionSummary, fusion_summary, run_hlo
from tpu_perf.analyzers.hlo_analysis import HloAnalysis, analyze_hlo, tile_for_chip
from tpu_perf.analyzers.layout import Layout, reshaped
from tpu_perf.errors import DataError
from tpu_perf.store import Run


def step_program(programs: pd.DataFrame) -> pd.Series | None:
    """The step program's row of a `programs` table: the one the collector marked `is_step` (of
    several, the first with FLOPs), else the only program there is; None when it is not known.
    Every analyzer that reads "the step program" (FLOPs, HLO, memory) takes it from here."""
    if programs.empty:
        return None
    marked = programs[programs["is_step"].fillna(False).astype(bool)] if "is_step" in programs else programs.iloc[0:0]
    if not marked.empty:
        with_flops = marked[marked["flops"].notna()] if "flops" in marked else marked.iloc[0:0]
        return (with_flops if not with_flops.empty else marked).iloc[0]
    return programs.iloc[0] if len(programs) == 1 else None


@dataclass(frozen=True, kw_only=True)
class ProgramFusion:
    function: str
    is_step: bool
    hlo_file: str
    summary: FusionSummary

    def to_dict(self) -> dict:
        return reshaped(self, PROGRAM_LAYOUT)


PROGRAM_LAYOUT: Layout = {"function": "function", "is_step": "is_step", "hlo_file": "hlo_file", **{f.name: f"summary.{f.name}" for f in fields(FusionSummary)}}
"""Each entry of the report's `hlo.programs`."""


@dataclass(frozen=True, kw_only=True)
class HloAnalysisDoc:
    """The report's `hlo.analysis`: the step program's deeper read, in numbers."""

    function: str | None
    dots: int
    """Dot (matmul) instructions in the step program."""
    dot_flops_by_dtype: dict[str, float]
    dot_flops_share_by_dtype: dict[str, float]
    padding_waste: float | None
    tile: int
    collectives: dict[str, int]
    async_pairs: int
    async_overlapped: int
    while_loops: int
    unfused_elementwise: dict[str, int]
    unfused_elementwise_bytes: float


@dataclass(frozen=True, kw_only=True)
class HloDoc:
    """The report's `hlo`, as published (`HloSection.to_dict`): the step program's fusion figures,
    every saved program's, and the analysis; its type is what the schema describes."""

    fusions: int | None
    fusions_by_kind: dict[str, int]
    top_level_instructions: int | None
    programs: list[dict[str, Any]]
    analysis: HloAnalysisDoc | None


def analyze_fusion(run: Run) -> list[ProgramFusion]:
    """One summary per saved program, the step program first."""
    programs = run.programs
    if programs.empty or "hlo_file" not in programs:
        return []
    out = []
    for row in programs.sort_values("is_step", ascending=False).itertuples():
        if not isinstance(row.hlo_file, str) or not run.exists(row.hlo_file):
            continue
        try:
            module = run_hlo(run, row.hlo_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{run.file_path(row.hlo_file)}: cannot be read ({exc})") from None
        out.append(ProgramFusion(function=row.function, is_step=bool(row.is_step), hlo_file=row.hlo_file, summary=fusion_summary(module)))
    return out


@dataclass(frozen=True, kw_only=True)
class HloSection:
    """The report's `hlo`: fusion figures of the step program, every program's summary, and the
    deeper read of the step program (dots, padding, collectives, loops, unfused work)."""

    programs: list[ProgramFusion]
    analysis_function: str | None
    analysis: HloAnalysis | None
    program_rows: list[dict[str, Any]]
    """The run's `programs` table as records (the report's top-level `programs`)."""

    step_function: str | None = None
    """The step program's function (`step_program`): the one every part of the report means by it."""

    @property
    def step(self) -> ProgramFusion | None:
        """The step program's fusion figures (the program `step_program` chose)."""
        return next((p for p in self.programs if p.function == self.step_function), None)

    def to_dict(self) -> HloDoc:
        step, a = self.step, self.analysis
        analysis = None if a is None else HloAnalysisDoc(
            function=self.analysis_function, dots=len(a.dots), dot_flops_by_dtype=a.dot_flops_by_dtype, dot_flops_share_by_dtype=a.dot_flops_share_by_dtype,
            padding_waste=a.padding_waste, tile=a.tile, collectives=a.collectives, async_pairs=a.async_pairs, async_overlapped=a.async_overlapped,
            while_loops=a.while_loops, unfused_elementwise=a.unfused_elementwise, unfused_elementwise_bytes=a.unfused_elementwise_bytes,
        )  # fmt: skip
        return HloDoc(
            fusions=step.summary.fusions if step else None,
            fusions_by_kind=step.summary.fusions_by_kind if step else {},
            top_level_instructions=step.summary.top_level_instructions if step else None,
            programs=[p.to_dict() for p in self.programs],
            analysis=analysis,
        )


def analyze_hlo_section(run: Run, *, chip: str | None) -> HloSection:
    """`chip` sets the matmul tile the padding figures are judged against (the run's chip)."""
    fusion = analyze_fusion(run)
    table = run.programs
    rows = table.astype(object).where(table.notna(), None).to_dict("records") if not table.empty else []
    chosen = step_program(table)
    step = rows[table.index.get_loc(chosen.name)] if chosen is not None else None
    function = None if step is None else step.get("function")
    if step is None or not isinstance(step.get("hlo_file"), str) or not run.exists(step["hlo_file"]):
        return HloSection(programs=fusion, analysis_function=None, analysis=None, program_rows=rows, step_function=function)
    analysis = analyze_hlo(run_hlo(run, step["hlo_file"]), tile=tile_for_chip(chip))
    return HloSection(programs=fusion, analysis_function=step["function"], analysis=analysis, program_rows=rows, step_function=function)
