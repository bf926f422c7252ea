"""What run this is: identity, status, command, hardware, versions, warnings (the report's `run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    id: str
    name: str
    url: str
    status: str
    exit_code: int | None
    started_at: float | None
    ended_at: float | None
    command: list[str]
    tags: dict[str, str]
    frameworks: list[str]
    hardware: dict[str, Any]
    git: dict[str, Any] | None
    error: str | None
    warnings: list[str] = field(default_factory=list)
    imported: bool = False
    """Made by `tpu-perf import` from a trace, not recorded: no script ran under tpu-perf."""


def analyze_run_info(run: Run) -> RunInfo:
    from tpu_perf.analyzers.flops import chip_mismatch

    m = run.manifest
    mismatch = chip_mismatch(run)
    return RunInfo(
        id=run.id,
        name=run.name,
        url=run.url,
        status=run.status,
        exit_code=m.get("exit_code"),
        started_at=m.get("started_at"),
        ended_at=m.get("ended_at"),
        command=list(m.get("command") or []),
        tags=dict(run.tags),
        frameworks=list(m.get("frameworks") or []),
        hardware=dict(m.get("hardware") or {}),
        git=m.get("git"),
        error=(m.get("error") or {}).get("message"),
        warnings=[*(m.get("warnings") or []), *([mismatch] if mismatch else [])],
        imported=bool(m.get("imported")),
    )
