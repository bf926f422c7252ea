"""Compilation: how many, how long, and which happened after warm-up (recompiles to look at).

Zero compiles and unknown compiles differ: a JAX recording hears every backend compile, and
PyTorch on CPU/GPU compiles only through Dynamo, which the recorder hears too; but a trace imported
from elsewhere carries no compile events, and torch-tpu compiles its lazy graphs where no hook sees
them. Those runs get None (and a `reason`), never "0 compiles, 0 s".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from tpu_perf.analyzers.steps import run_steps, warmup_count
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class SlowCompile:
    function: str
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class CompileStats:
    count: int | None
    total_s: float | None
    after_warmup: int | None
    after_warmup_s: float | None
    after_warmup_functions: dict[str, int] = field(default_factory=dict)
    cache_hits: int | None = None
    cache_misses: int | None = None
    slowest: list[SlowCompile] = field(default_factory=list)
    reason: str | None = None
    """Why the figures are unknown (None when they are known)."""
    other_after_warmup: dict[str, int] = field(default_factory=dict)
    """Compiles after warm-up of other functions than the detected step function (eval, helpers):
    first compiles of programs the loop calls now and then, not recompiles of the step."""


def unseen_reason(run: Run) -> str | None:
    """Why this run's compiles cannot be known, or None when the recorder hears every compile."""
    m = run.manifest
    if m.get("imported"):
        return "an imported trace carries no compile events"
    frameworks = set(m.get("frameworks") or [])
    platform = (m.get("hardware") or {}).get("platform")
    if "jax" in frameworks:
        return None
    if frameworks & {"torch", "pytorch"}:
        return "torch-tpu compiles its graphs where no hook sees them (see compile.torch.tpu_compile_cache)" if platform == "tpu" else None
    return "no framework seen: no compiles to hear" if not frameworks else None


def analyze_compiles(run: Run) -> CompileStats:
    reason = unseen_reason(run)
    if reason is not None:
        return CompileStats(count=None, total_s=None, after_warmup=None, after_warmup_s=None, reason=reason)
    compiles = run.compiles
    if compiles.empty:
        return CompileStats(count=0, total_s=0.0, after_warmup=0, after_warmup_s=0.0, cache_hits=0, cache_misses=0)
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
        slowest=[SlowCompile(function=str(f), duration_s=float(d)) for f, d in zip(slowest["function"], slowest["duration_s"], strict=True)],
        other_after_warmup={str(k): int(v) for k, v in others["function"].value_counts().items()},
    )


def _step_function(steps: pd.DataFrame) -> str | None:
    """The jitted function detected as the step (`auto:jit(NAME)`), whose compiles are the recompiles."""
    if steps.empty or "source" not in steps:
        return None
    m = re.fullmatch(r"auto:jit\((.+)\)", str(steps["source"].iloc[0]))
    return m.group(1) if m else None
