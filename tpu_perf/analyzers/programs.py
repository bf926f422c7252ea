"""Fusion summaries of the programs whose optimized HLO a run saved."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tpu_perf.analyzers.hlo import FusionSummary, fusion_summary, run_hlo
from tpu_perf.errors import DataError
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class ProgramFusion:
    function: str
    is_step: bool
    hlo_file: str
    summary: FusionSummary

    def to_dict(self) -> dict:
        return {"function": self.function, "is_step": self.is_step, "hlo_file": self.hlo_file, **asdict(self.summary)}


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
