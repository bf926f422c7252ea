"""Compilation: how many, how long, and which happened after warm-up (recompiles to look at)."""

from __future__ import annotations

from dataclasses import dataclass

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
    )
