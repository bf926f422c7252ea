"""Samples time series (host RSS, device memory, runtime metrics) beside the training loop.

One daemon thread; each source is a function returning rows for a table. A source that raises is
dropped with one warning, so a broken metric never touches the loop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Rows = list[dict[str, Any]]


@dataclass
class SampleSource:
    name: str
    sample: Callable[[], Rows]
    table: str = "memory"


def host_memory_source() -> SampleSource:
    """Resident memory of the recording process (the training script runs in it)."""
    import psutil

    process = psutil.Process(os.getpid())

    def sample() -> Rows:
        info = process.memory_info()
        return [{"device": "host", "bytes_in_use": int(info.rss), "peak_bytes": None, "limit_bytes": None, "source": "psutil"}]

    return SampleSource("host", sample)


class Sampler:
    """Calls every source each `interval_s` and appends the rows, stamped with the recorder clock."""

    def __init__(self, interval_s: float, now: Callable[[], float], append: Callable[[str, dict[str, Any]], None], warn: Callable[[str], None]) -> None:
        self.interval_s = interval_s
        self._now = now
        self._append = append
        self._warn = warn
        self._sources: list[SampleSource] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, source: SampleSource) -> None:
        with self._lock:
            self._sources.append(source)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tpu-perf-sampler", daemon=True)
        self._thread.start()

    def sample_once(self) -> None:
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            t = self._now()
            try:
                rows = source.sample()
            except Exception as exc:
                self._warn(f"sampling {source.name} failed ({type(exc).__name__}: {exc}); source dropped")
                with self._lock:
                    self._sources.remove(source)
                continue
            for row in rows:
                self._append(source.table, {"time_s": t, **row})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample_once()
