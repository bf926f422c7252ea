"""`memory.out_of_memory`: a run that died out of device memory, and the allocation that failed.

The recorder names the JAX function whose call raised `RESOURCE_EXHAUSTED` (run.json
`out_of_memory`); otherwise the run's error (JAX reports a failed asynchronous step where its result
is read, PyTorch raises `OutOfMemoryError`) is matched by its words. `memory.at_peak` is then the
breakdown of the step program (docs/memory.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpu_perf.analyzers.at_peak import AtPeak
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class OutOfMemory:
    """The script died out of device memory (the run is `failed`); `at_peak` is that program's."""

    function: str | None
    message: str
    """The runtime's error line (XLA's RESOURCE_EXHAUSTED, CUDA's out of memory)."""
    failed_allocation_bytes: int | None
    """The allocation that could not be made, when the message gives its size."""


_ALLOCATION = (
    (re.compile(r"allocat\w* (\d+) bytes"), 1),
    (re.compile(r"allocate ([\d.]+)\s*([KMGT])i?B?\b"), 0),
    (re.compile(r"allocate ([\d.]+)\s*(GiB|MiB|KiB|TiB)"), 0),
)
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def failed_allocation(message: str) -> int | None:
    """Bytes of the allocation an out-of-memory message names (`allocating 2199023256320 bytes`,
    `Tried to allocate 20.00 GiB`, `allocate 1.50G`), else None."""
    for pattern, plain in _ALLOCATION:
        m = pattern.search(message)
        if m:
            return int(m.group(1)) if plain else int(float(m.group(1)) * _UNITS[m.group(2)[0]])
    return None


_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OutOfMemoryError")


def out_of_memory(run: Run, at_peak: AtPeak | None) -> OutOfMemory | None:
    """`memory.out_of_memory`: the run failed out of device memory. The recorder names the function
    whose call raised it; an error raised later (JAX reports a failed asynchronous step where its
    result is read) is the step program's."""
    raw = run.manifest.get("out_of_memory")
    error = run.manifest.get("error")
    if isinstance(raw, dict) and raw.get("message"):
        function, message = str(raw.get("function")), str(raw["message"])
    elif run.manifest.get("status") == "failed" and isinstance(error, dict) and any(m in str(error.get("message")) for m in _OOM_MARKERS):
        function, message = (at_peak.program if at_peak else None), str(error["message"])
    else:
        return None
    return OutOfMemory(function=function, message=message[:500], failed_allocation_bytes=failed_allocation(message))
