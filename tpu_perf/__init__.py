"""tpu-perf: record, analyse and guard the performance of ML training on TPUs (and GPUs).

Public API: `step()` marks training steps from inside a script; `record()` records a block of
code (a notebook cell) into a run; `load_run()` and `list_runs()` read recorded runs; `mfu()`
computes model FLOPs utilisation by a named convention. `%load_ext tpu_perf` adds the `%%tpu_perf`
cell magic and the `%tpu_perf` line magic to IPython (`tpu_perf/notebook/`).

`import tpu_perf` stays light (a few milliseconds) so a training script can call `tpu_perf.step()`
cheaply: pandas, pyarrow and the readers load on first use of the names that need them, and
frameworks are imported only by the collectors that hook them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpu_perf.marks import request, step, token
from tpu_perf.version import __version__

if TYPE_CHECKING:
    from tpu_perf.modelflops.calculator import mfu
    from tpu_perf.notebook.recording import record
    from tpu_perf.store import Run, list_runs, load_run

__all__ = ["Run", "__version__", "list_runs", "load_ipython_extension", "load_run", "mfu", "record", "request", "step", "token"]

_LAZY = {
    "Run": "tpu_perf.store",
    "list_runs": "tpu_perf.store",
    "load_run": "tpu_perf.store",
    "mfu": "tpu_perf.modelflops.calculator",
    "record": "tpu_perf.notebook.recording",
}


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext tpu_perf`: the `%%tpu_perf` cell magic and the `%tpu_perf` line magic."""
    from tpu_perf.notebook.magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tpu_perf' has no attribute {name!r}")
