"""torch.compile and torch-tpu compilation detail for the report: `compile.torch`.

Graph breaks and recompiles with their reasons come from the compiles table (events the torch
collector wrote from Dynamo's records); graph counts and torch-tpu's compile-cache counters from
the manifest's `torch` facts. The common `compile.*` keys stay as every run has them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class TorchCompileStats:
    unique_graphs: int | None
    graph_breaks: int
    graph_break_reasons: list[dict[str, Any]] = field(default_factory=list)
    """One per distinct reason: `reason` (first line), `detail`, `count`."""
    recompiles: int = 0
    recompile_reasons: list[dict[str, Any]] = field(default_factory=list)
    """One per recompile: `function`, `compile_id`, `reason`, `time_s`."""
    compile_time_s: float = 0.0
    tpu_compile_cache: dict[str, Any] | None = None
    """torch-tpu `_get_cache_stats()`: requests, hits, misses, compilations (as it names them)."""


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series([None] * len(frame), index=frame.index, dtype=object)


def guard_words(reason: str) -> str:
    """Dynamo's failed guard in a few words, for a table cell or a sentence:
    "0/1: len(kwargs) == 7  # source  # file.py:134 in f  User stack trace: ..." ->
    "len(kwargs) == 7 (file.py:134 in f)"."""
    lines = reason.strip().splitlines()
    parts = [p.strip() for p in (lines[0] if lines else "").split("#")]
    guard = parts[0].split(": ", 1)[-1] if re.match(r"\d+/\d+: ", parts[0]) else parts[0]
    return f"{guard} ({parts[-1]})" if len(parts) > 2 and parts[-1] else guard


def analyze_torch_compile(run: Run) -> TorchCompileStats | None:
    """None for runs without torch (the report then has no `compile.torch`)."""
    facts = run.manifest.get("torch")
    if not facts:
        return None
    compiles = run.compiles
    dynamo = compiles[_column(compiles, "compiler") == "dynamo"] if not compiles.empty else compiles
    breaks = dynamo[dynamo["event"] == "graph_break"] if not dynamo.empty else dynamo
    builds = dynamo[dynamo["event"] == "backend_compile"] if not dynamo.empty else dynamo
    reasons = _column(builds, "recompile_reason")
    recompiled = builds[reasons.notna() & (reasons.astype(str) != "")] if not builds.empty else builds
    return TorchCompileStats(
        unique_graphs=(facts.get("dynamo") or {}).get("unique_graphs"),
        graph_breaks=int(_column(breaks, "count").fillna(1).sum()) if not breaks.empty else 0,
        graph_break_reasons=[{"reason": str(r.function), "detail": str(r.reason), "count": int(r.count)} for r in breaks.itertuples()] if not breaks.empty else [],
        recompiles=len(recompiled),
        recompile_reasons=[{"function": str(r.function), "compile_id": str(r.compile_id), "reason": str(r.recompile_reason), "time_s": float(r.time_s)} for r in recompiled.itertuples()] if not recompiled.empty else [],
        compile_time_s=float(builds["duration_s"].sum()) if not builds.empty else 0.0,
        tpu_compile_cache=facts.get("tpu_compile_cache"),
    )
