"""Compilation: how many, how long, and which happened after warm-up (recompiles to look at).

Zero compiles and unknown compiles differ: a JAX recording hears every backend compile, and
PyTorch on CPU/GPU compiles only through Dynamo, which the recorder hears too; but a trace imported
from elsewhere carries no compile events, and torch-tpu compiles its lazy graphs where no hook sees
them. Those runs get None (and a `reason`), never "0 compiles, 0 s".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.analyzers.inference import run_requests
from tpu_perf.analyzers.steps import run_steps, run_warmup
from tpu_perf.analyzers.torch_compile import guard_words
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
    """Compiles after warm-up that are not recompiles: first compiles of programs the loop calls now
    and then (eval, helpers), compiles of other functions than the step that all fall in one step
    (eager ops at an epoch end or in a log line), and compiles a checkpointing or logging library
    asked for."""
    after_warmup_causes: list[dict[str, Any]] = field(default_factory=list)
    """What changed in the arguments of the functions that recompiled after warm-up, by function and
    kind (`shape`, `dtype`, `sharding`, `static`, `structure`, `value`, `unknown`): `count` and the
    first `example` (JAX recordings; collectors/jax/recompiles.py). Empty where none was recorded."""


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
    late = after_warmup_compiles(run)
    recompiles, others = (None, None) if late is None else (late[late["recompile"]], late[~late["recompile"]])
    slowest = backend.sort_values("duration_s", ascending=False).head(5)
    return CompileStats(
        count=len(backend),
        total_s=float(backend["duration_s"].sum()),
        after_warmup=None if recompiles is None else len(recompiles),
        after_warmup_s=None if recompiles is None else float(recompiles["duration_s"].sum()),
        after_warmup_functions={} if recompiles is None else _by_function(recompiles),
        cache_hits=int((compiles["event"] == "cache_hit").sum()),
        cache_misses=int((compiles["event"] == "cache_miss").sum()),
        slowest=[SlowCompile(function=str(f), duration_s=float(d)) for f, d in zip(slowest["function"], slowest["duration_s"], strict=True)],
        other_after_warmup={} if others is None else _by_function(others),
        after_warmup_causes=[] if recompiles is None or recompiles.empty else _causes(run, recompiles),
    )


def _causes(run: Run, recompiles: pd.DataFrame) -> list[dict[str, object]]:
    """The recorder's causes of the recompiles after warm-up: those of the functions that recompiled,
    stamped after the first of their recompiles began, grouped by (function, kind), most first."""
    causes = (run.manifest.get("jax") or {}).get("recompile_causes") or []
    if not causes and "recompile_reason" in recompiles:  # Dynamo says which guard failed at each
        causes = [{"function": f, "kind": "guard", "what": guard_words(r), "time_s": t}
                  for f, r, t in zip(recompiles["function"], recompiles["recompile_reason"], recompiles["time_s"], strict=True) if isinstance(r, str) and r.strip()]
    since = float(recompiles["time_s"].min())
    functions = set(recompiles["function"].astype(str))
    groups: dict[tuple[str, str], dict[str, object]] = {}
    for c in causes:
        if str(c.get("function")) not in functions or float(c.get("time_s") or 0.0) < since:
            continue
        g = groups.setdefault((str(c["function"]), str(c["kind"])), {"function": c["function"], "kind": c["kind"], "count": 0, "example": c.get("what")})
        g["count"] = int(g["count"]) + 1
    return sorted(groups.values(), key=lambda g: -int(g["count"]))


def after_warmup_compiles(run: Run) -> pd.DataFrame | None:
    """Backend compiles after warm-up, each with `recompile`: the one definition of a recompile that
    the report (`compile.after_warmup`) and the advisor (`recompilation`) share.

    A recompile is a compile of the step function (the detected `auto:jit(NAME)`), or of a function
    that had already compiled earlier in the run (a new shape or dtype for it). The first compile of
    a function the loop calls now and then (an eval step, metrics, a checkpoint helper, Keras's
    `test_step` at the end of an epoch) is not one: it compiles once and is cached. Nor is a compile
    a checkpointing or logging library asked for (`occasional`, collectors/jax/callers.py: orbax
    slicing the arrays it saves, at every save): the step's shapes are not what changed. Warm-up is
    `steps.run_warmup`. A run of requests without steps (Hugging Face `generate()`, a compiled
    forward under it) warms up in its first request: a compile in a later one is after warm-up.
    None: no steps and no requests, so no warm-up to count after (unknown, not zero)."""
    steps = run_steps(run)
    if steps.empty:
        requests = run_requests(run)[0]
        if len(requests) < 2:
            return None
        steps = requests[["start_time_s", "end_time_s"]].astype(float).sort_values("end_time_s", kind="stable")
        warmup = 1
    else:
        warmup = run_warmup(run)
    compiles = run.compiles
    if compiles.empty:
        return pd.DataFrame({"time_s": pd.Series(dtype=float), "duration_s": pd.Series(dtype=float), "function": pd.Series(dtype=str), "recompile": pd.Series(dtype=bool)})
    backend = compiles[compiles["event"] == "backend_compile"]
    if warmup >= len(steps):
        return backend.iloc[0:0].assign(recompile=pd.Series(dtype=bool))
    warm_end, last_end = float(steps["end_time_s"].iloc[warmup - 1]), float(steps["end_time_s"].iloc[-1])
    backend = backend.sort_values("time_s", kind="stable")
    site = _site(backend)
    seen_before = site.duplicated(keep="first").to_numpy()
    step_fn = _step_function(steps)
    is_step = backend["function"].isin({step_fn, f"jit({step_fn})"}).to_numpy() if step_fn is not None else np.zeros(len(backend), dtype=bool)
    occasional = backend["occasional"].astype("boolean").fillna(False).to_numpy(bool) if "occasional" in backend else np.zeros(len(backend), dtype=bool)
    late = (backend["time_s"] > warm_end).to_numpy() & (backend["time_s"] <= last_end).to_numpy()
    # "Compiled before" is at the same call site (`caller`), and a function other than the step
    # counts only where that site compiles in more than one step after warm-up. Compiles that all
    # fall in one step are a boundary's: an epoch, eval or logging boundary ran eager ops once for
    # new shapes (flax's `metrics.compute()` dividing and `accuracy * 100` in a log line:
    # `jit(true_divide)`, `jit(multiply)`, compiled at initialisation for other shapes); that step
    # is charged for them (`compiled`, out of the steady statistics), the step function is not.
    holder = np.searchsorted(steps["end_time_s"].to_numpy(float), backend["time_s"].to_numpy(float), side="left")  # the step whose (start, end] holds it
    recurring = pd.Series(holder[late], index=site[late].to_numpy()).groupby(level=0).nunique() > 1
    again = site.map(recurring).astype("boolean").fillna(False).to_numpy(bool) & late
    if step_fn is None:  # Dynamo's frames (PyTorch): which are the step's is unknown, each counts
        again = np.ones(len(backend), dtype=bool)
    return backend.assign(recompile=is_step | (seen_before & again & ~occasional))[late]


def _site(compiles: pd.DataFrame) -> pd.Series:
    """Function and call site of each compile (`caller`, where recorded): an eager op compiled at
    initialisation and again in a log line are two sites, each compiling once."""
    function = compiles["function"].astype(str)
    if "caller" not in compiles:
        return function
    return function + " @ " + compiles["caller"].astype("string").fillna("").astype(str)


def _by_function(rows: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in rows["function"].value_counts().items()}


def _step_function(steps: pd.DataFrame) -> str | None:
    """The jitted function detected as the step (`auto:jit(NAME)`, `auto:pmap(NAME)`), whose compiles are the recompiles."""
    if steps.empty or "source" not in steps:
        return None
    m = re.fullmatch(r"auto:(?:jit|pmap)\((.+)\)", str(steps["source"].iloc[0]))
    return m.group(1) if m else None
