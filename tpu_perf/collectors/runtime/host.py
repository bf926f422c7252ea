"""The host, always: resident memory of the recording process and CPU busy percent (psutil)."""

from __future__ import annotations

import os
from typing import Any

Rows = list[dict[str, Any]]


class HostSource:
    """RSS goes to `memory` (device `host`); system and process CPU percent to `runtime`."""

    name = "host"

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._process = psutil.Process(os.getpid())
        self._process.cpu_percent(None)  # first call primes the counters; it returns 0.0
        psutil.cpu_percent(None)

    def sample(self) -> Rows:
        rss = int(self._process.memory_info().rss)
        return [
            {"_table": "memory", "device": "host", "bytes_in_use": rss, "peak_bytes": None, "limit_bytes": None, "source": "psutil"},
            {"_table": "runtime", "device": "host", "source": "psutil", "cpu_percent": float(self._psutil.cpu_percent(None)), "process_cpu_percent": float(self._process.cpu_percent(None))},
        ]
