"""Compilation: how many, how long, and which happened after warm-up (recompiles to look at)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from tpu_perf.analyzers.steps import run_steps, warmup_count
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class CompileStats:
    count: int
    total_s: float
    after_warmup: int
    after_warmup_s: float
    after_warmup_functions: dict[str, int]
    cache_hits: int
    cache_misses: int
    slowest: list[tuple[str, float]]
    other_after_warmup: dict[str, int] = field(default_factory=dict)
    """Compiles after warm-up of other functions than the detected step function (eval, helpers):
    first compiles of programs the loop calls now and then, not recompiles of the step."""


def analyze_compiles(run: Run) -> CompileStats:
    compiles = run.compiles
    if compiles.empty:
        return CompileStats(count=0, total_s=0.0, after_warmup=0, after_warmup_s=0.0, after_warmup_functions={}, cache_hits=0, cache_misses=0, slowest=[])
    backend = compiles[compiles["event"] == "backend_compile"]
    steps = run_steps(run)
    warmup = warmup_count(steps, (run.manifest.get("config") or {}).get("warmup_steps"))
    if steps.empty or warmup >= len(steps):
        late = backend.iloc[0:0]
    else:
        warm_end = float(steps["end_time_s"].iloc[warmup - 1])
        last_end = float(steps["end_time_s"].iloc[-1])
        late = backend[(backend["time_s"] > warm_end) & (backend["time_s"] <= last_end)]
    step_fn = _step_function(steps)
    others = late.iloc[0:0]
    if step_fn is not None and not late.empty:
        is_step = late["function"].isin({step_fn, f"jit({step_fn})"})
        others, late = late[~is_step], late[is_step]
    slowest = backend.sort_values("duration_s", ascending=False).head(5)
    return CompileStats(
        count=len(backend),
        total_s=float(backend["duration_s"].sum()),
        after_warmup=len(late),
        after_warmup_s=float(late["duration_s"].sum()),
        after_warmup_functions={str(k): int(v) for k, v in late["function"].value_counts().items()},
        cache_hits=int((compiles["event"] == "cache_hit").sum()),
        cache_misses=int((compiles["event"] == "cache_miss").sum()),
        slowest=[(str(f), float(d)) for f, d in zip(slowest["function"], slowest["duration_s"], strict=True)],
        other_after_warmup={str(k): int(v) for k, v in others["function"].value_counts().items()},
    )


def _step_function(steps: pd.DataFrame) -> str | None:
    """The jitted function detected as the step (`auto:jit(NAME)`), whose compiles are the recompiles."""
    if steps.empty or "source" not in steps:
        return None
    m = re.fullmatch(r"auto:jit\((.+)\)", str(steps["source"].iloc[0]))
    return m.group(1) if m else None
