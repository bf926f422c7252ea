"""Samples time series (host, device memory, runtime metrics) beside the training loop.

One daemon thread, not a process: a sample is a few microseconds of Python plus calls that wait
on sockets with the GIL released, so a thread costs the loop less than a process would cost in
start-up, a second interpreter's memory and CPU, and clock hand-over; and in-process sources
(`jax.Device.memory_stats()`, torch's allocator) can only be read from inside the process. The
measured cost is in docs/runtime.md (bench/runtime_overhead.py).

Each source is an object with `name` and `sample() -> rows` (and optionally `finish() -> rows`).
A row goes to the table named by its `_table` key, else the source's `table`. A source that raises
is dropped with one warning, so a broken metric never touches the loop. Sources that must never
block (gRPC) carry their own deadlines; `stop()` waits for the thread a bounded time only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpu_perf.collectors import forks

Rows = list[dict[str, Any]]

DEVICE_SOURCE_PRIORITY = {"libtpu": 0, "nvml": 1, "jax": 2, "torch": 3}
"""Device-memory sources, best first. A fallback is sampled only while no better one delivers
device rows: libtpu sees all HBM (not only the allocator's), NVML all GPU memory; the frameworks'
allocator stats are what is left when neither answers."""

DEFAULT_SAMPLE_INTERVAL_S = 1.0
"""Runtime sampling period: measured cost at this rate is far under 1 % of a loop (docs/runtime.md)."""

STOP_WAIT_S = 2.0
"""How long `stop()` waits for the last sample (calls have deadlines well under this)."""


@dataclass
class SampleSource:
    name: str
    sample: Callable[[], Rows]
    table: str = "memory"


class Sampler:
    """Calls every source each `interval_s` and appends the rows, stamped with the recorder clock."""

    def __init__(self, interval_s: float, now: Callable[[], float], append: Callable[[str, dict[str, Any]], None], warn: Callable[[str], None]) -> None:
        self.interval_s = interval_s
        self._now = now
        self._append = append
        self._warn = warn
        self._sources: list[Any] = []
        self._delivering: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0
        self.cpu_s = 0.0
        """CPU time the sampler thread spent sampling: its whole cost to the process."""

    def add(self, source: Any) -> None:
        with self._lock:
            self._sources.append(source)

    def note(self, source: str, event: str, detail: str = "") -> None:
        """A sampler event (skipped, connected, unavailable, recovered...) in the `sampler` table."""
        self._append("sampler", {"time_s": self._now(), "source": source, "event": event, "detail": detail})

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tpu-perf-sampler", daemon=True)
        self._thread.start()

    def sample_once(self) -> None:
        cpu0 = time.thread_time()
        with self._lock:
            sources = list(self._sources)
        ranks = [DEVICE_SOURCE_PRIORITY[n] for n in self._delivering]
        best = min(ranks) if ranks else None
        for source in sources:
            rank = DEVICE_SOURCE_PRIORITY.get(source.name)
            if rank is not None and best is not None and rank > best:
                continue  # a better device source is delivering
            t = self._now()
            try:
                rows = source.sample()
            except Exception as exc:
                self._warn(f"sampling {source.name} failed ({type(exc).__name__}: {exc}); source dropped")
                with self._lock:
                    self._sources.remove(source)
                self._delivering.discard(source.name)
                continue
            self._write(source, t, rows)
        self.samples += 1
        self.cpu_s += time.thread_time() - cpu0

    def _write(self, source: Any, t: float, rows: Rows) -> None:
        delivered = False
        for row in rows:
            table = row.pop("_table", None) or getattr(source, "table", "runtime")
            if table == "memory" and row.get("device") != "host":
                delivered = True
            # A sample is of the moment it was asked for; an event (the service went down) of the moment
            # it was seen, which is after a call that started before the fault and failed because of it.
            self._append(table, {"time_s": self._now() if table == "sampler" else t, **row})
        if source.name in DEVICE_SOURCE_PRIORITY:
            (self._delivering.add if delivered else self._delivering.discard)(source.name)

    def _loop(self) -> None:
        start = time.monotonic()
        ticks = 0
        while True:
            ticks += 1
            delay = start + ticks * self.interval_s - time.monotonic()  # fixed rate, no drift
            if delay < 0:  # a slow sample: skip the missed ticks rather than bursting
                ticks += int(-delay // self.interval_s) + 1
                delay = start + ticks * self.interval_s - time.monotonic()
            if self._stop.wait(max(delay, 0.0)):
                break
            with forks.quiet:  # a fork waits for the sample: no runtime-client lock held in the child
                self.sample_once()
        self.sample_once()  # the last one, taken here so a stuck source never blocks the caller
        self._finish_sources()

    def _finish_sources(self) -> None:
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            finish = getattr(source, "finish", None)
            if finish is None:
                continue
            try:
                self._write(source, self._now(), finish())
            except Exception as exc:
                self._warn(f"closing sampler source {source.name} failed ({type(exc).__name__}: {exc})")

    def _close_sources(self) -> None:
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            close = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:  # closing is best effort; the warning below says what is lost
                    self._warn(f"closing sampler source {source.name} failed ({type(exc).__name__}: {exc})")

    def stop(self) -> None:
        """Take a last sample and close the sources; never waits more than STOP_WAIT_S."""
        self._stop.set()
        if self._thread is None:
            self.sample_once()
            self._finish_sources()
            return
        self._thread.join(timeout=STOP_WAIT_S)
        if self._thread.is_alive():
            # A source is stuck in a call (a gRPC request on a loaded machine). Closing it from here
            # cancels the call, so the thread ends before the interpreter does: a native call still
            # in flight at exit is what aborts a process ("terminate called without an active exception").
            self._close_sources()
            self._thread.join(timeout=STOP_WAIT_S)
            self._warn(f"the sampler did not stop within {STOP_WAIT_S:.0f} s (a metric source is stuck); its last samples are missing")
        self.note("sampler", "stopped", f"samples={self.samples} interval_s={self.interval_s} cpu_s={self.cpu_s:.6f}")

