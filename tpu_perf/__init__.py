"""tpu-perf: record, analyse and guard the performance of ML training on TPUs (and GPUs).

Public API: `step()` marks training steps from inside a script; `load_run()` and `list_runs()`
read recorded runs; `mfu()` computes model FLOPs utilisation by a named convention. Imports stay light: frameworks are imported only by the collectors that need them.
"""

from __future__ import annotations

from tpu_perf.marks import step
from tpu_perf.modelflops.calculator import mfu
from tpu_perf.store import Run, list_runs, load_run

__version__ = "0.1.0"

__all__ = ["Run", "__version__", "list_runs", "load_run", "mfu", "step"]
