"""`torch.compile` and torch-tpu compilation: compile events, recompiles and graph breaks.

Dynamo keeps one `CompilationMetrics` record per compiled frame (start and end times, the reason it
recompiled, graph breaks) in `torch._dynamo.utils._compilation_metrics`. New records are turned into
`backend_compile` events before every step boundary (the recorder syncs first), so a step that
compiled is known as such when it closes; the check costs one `len()` when nothing compiled.
Graph-break reasons and graph counts come from `torch._dynamo.utils.counters` at the end.
torch-tpu's compile-cache counters come from `torch.tpu._get_cache_stats()` where it answers.
"""

from __future__ import annotations

import sys
from typing import Any

from tpu_perf.collectors.session import Recorder
from tpu_perf.jsonio import to_jsonable

MAX_REASON_CHARS = 2000
"""Graph-break explanations run long (hints, links); the first lines say what broke."""


def _dynamo_utils() -> Any:
    """Dynamo's utils module if the script (or torch.compile) loaded it; never imported here."""
    return sys.modules.get("torch._dynamo.utils")


class DynamoCompiles:
    """Reads Dynamo's compilation records as they appear."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self._seen: set[tuple[str, bool | None, int | None]] = set()
        self._seen_len = 0

    def drain(self) -> None:
        """Write the compile records Dynamo added since the last call."""
        utils = _dynamo_utils()
        metrics = getattr(utils, "_compilation_metrics", None) if utils is not None else None
        if not metrics:
            return
        if len(metrics) == self._seen_len and metrics.maxlen != len(metrics):
            return
        self._seen_len = len(metrics)
        for m in list(metrics):
            key = (str(m.compile_id), m.is_forward, m.start_time_us)
            if key in self._seen or m.is_runtime:
                continue
            self._seen.add(key)
            self._write(m)

    def _write(self, m: Any) -> None:
        start_us, end_us = m.start_time_us, getattr(m, "end_time_us", None)
        duration = (end_us - start_us) / 1e6 if (start_us and end_us) else float(m.entire_frame_compile_time_s or 0.0)
        name = m.co_name or f"frame {m.compile_id}"
        self.rec.compile_event(
            function=name if m.is_forward is not False else f"{name} (backward)",
            duration_s=duration,
            event="backend_compile",
            end_time_s=end_us / 1e6 if end_us else None,
            compiler="dynamo",
            compile_id=str(m.compile_id),
            recompile_reason=m.recompile_reason,
            graph_breaks=m.num_graph_breaks,
            co_filename=m.co_filename,
            co_firstlineno=m.co_firstlineno,
            fail_reason=(m.fail_reason or None) and str(m.fail_reason)[:MAX_REASON_CHARS],
        )

    def summary(self) -> dict[str, Any] | None:
        """Counters for the manifest, and one `graph_break` event per distinct reason."""
        self.drain()
        utils = _dynamo_utils()
        counters = getattr(utils, "counters", None) if utils is not None else None
        if counters is None:
            return None
        breaks = dict(counters.get("graph_break", {}))
        for reason, count in breaks.items():
            self.rec.compile_event(function=_first_line(reason), duration_s=0.0, event="graph_break", compiler="dynamo", reason=str(reason)[:MAX_REASON_CHARS], count=int(count))
        stats = dict(counters.get("stats", {}))
        return {
            "unique_graphs": int(stats.get("unique_graphs", 0)),
            "calls_captured": int(stats.get("calls_captured", 0)),
            "graph_breaks": int(sum(breaks.values())),
            "frames": {str(k): int(v) for k, v in dict(counters.get("frames", {})).items()},
        }


def _first_line(text: str) -> str:
    """The reason's headline, with Dynamo's one-line explanation when it gives one."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return "graph break"
    explanation = next((line.removeprefix("Explanation:").strip() for line in lines[1:] if line.startswith("Explanation:")), None)
    return (f"{lines[0]}: {explanation}" if explanation else lines[0])[:300]


def tpu_cache_stats(torch: Any) -> dict[str, Any] | None:
    """torch-tpu's compile-cache counters (requests, hits, misses, compilations), if it answers."""
    tpu = getattr(torch, "tpu", None)
    getter = getattr(tpu, "_get_cache_stats", None)
    if getter is None:
        return None
    try:
        stats = getter()
    except Exception:  # no TPU attached: the runtime is not initialised
        return None
    if stats is None:
        return None
    if not isinstance(stats, dict):
        stats = {k: getattr(stats, k) for k in dir(stats) if not k.startswith("_") and not callable(getattr(stats, k))}
    return to_jsonable(stats, lossy=True)
