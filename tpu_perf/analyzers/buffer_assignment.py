"""XLA's buffer assignment of a compiled program, and the time its temporaries peak.

The assignment (`*-buffer-assignment.txt`, saved by `tpu_perf.collectors.jax.at_peak`) lists every
allocation the program makes: its size, its memory space (`color`: 0 is the device's main memory,
HBM on a TPU; 1 is TPU VMEM, 2 SMEM), what it holds (an entry parameter, a constant, the
preallocated temporaries), and the values placed in it at an offset. The sum of the main space's
allocations is the compiler's own figure for the HBM the program needs (a TPU out-of-memory error
quotes it), so the at-peak breakdown is cut from it. Which temporaries share that memory at its
fullest comes from the live ranges XLA dumps beside it (`BufferLiveRange`: each value's first and
last position in the schedule).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field

import numpy as np

RESIDENT = ("parameter", "constant", "thread-local")
"""Allocations that hold memory for the whole program: the arguments (the caller's arrays, and the
outputs written into donated ones), constants, and per-thread scratch."""

SPACE_NAMES = {0: "default", 1: "vmem", 2: "smem"}
"""XLA's memory-space colors as the TPU compiler names them in its memory-usage report."""

_ALLOCATION = re.compile(r"^allocation (?P<number>\d+): size (?P<size>\d+)(?:, color (?P<color>\d+))?(?P<rest>.*)$")
_VALUE = re.compile(r"^\s*value: <\d+ (?P<name>[^\s{]+)(?:\{(?P<index>[\d,]*)\})? @\d+> \(size=(?P<size>\d+),offset=(?P<offset>\d+)\)")
_RANGE = re.compile(r"^\s+(?P<name>[^\s{]+)\{(?P<index>[\d,]*)\}:(?P<start>\d+)-(?P<end>\d+)\s*$")


@dataclass(frozen=True, kw_only=True)
class Value:
    name: str
    index: str
    """The tuple element (`0`, `1,2`), empty for an array value."""
    size: int
    offset: int


@dataclass(frozen=True, kw_only=True)
class Allocation:
    number: int
    size: int
    color: int
    kind: str
    """`parameter`, `constant`, `thread-local`, `temp` (XLA's preallocated temporaries) or `other`."""
    parameter: int | None
    values: list[Value] = field(default_factory=list)

    @property
    def resident(self) -> bool:
        return self.kind in RESIDENT


def space_name(color: int) -> str:
    return SPACE_NAMES.get(color, f"color {color}")


def _kind(rest: str) -> tuple[str, int | None]:
    m = re.search(r"\bparameter (\d+)", rest)
    if m:
        return "parameter", int(m.group(1))
    for kind in ("constant", "thread-local"):
        if f" {kind}" in rest:
            return kind, None
    return ("temp" if "preallocated-temp" in rest else "other"), None


def parse_assignment(text: str) -> list[Allocation]:
    """The allocations of XLA's buffer-assignment dump, with the values placed in each."""
    out: list[Allocation] = []
    for line in text.splitlines():
        if m := _ALLOCATION.match(line):
            kind, parameter = _kind(m.group("rest"))
            out.append(Allocation(number=int(m.group("number")), size=int(m.group("size")), color=int(m.group("color") or 0), kind=kind, parameter=parameter))
        elif out and (m := _VALUE.match(line)):
            out[-1].values.append(Value(name=m.group("name"), index=(m.group("index") or "").replace(" ", ""), size=int(m.group("size")), offset=int(m.group("offset"))))
    return out


def parse_ranges(text: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(value name, tuple index) -> (first, last) schedule position, from the live-range dump."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "BufferLiveRange:"), None)
    out: dict[tuple[str, str], tuple[int, int]] = {}
    if start is None:
        return out
    for line in lines[start + 1 :]:
        m = _RANGE.match(line)
        if not m:
            break
        out[(m.group("name"), m.group("index"))] = (int(m.group("start")), int(m.group("end")))
    return out


@dataclass(frozen=True, kw_only=True)
class Peak:
    time: int | None
    """Schedule position where the main space's temporaries hold the most bytes (None: none timed)."""
    live: list[tuple[Value, int]]
    """One value per place in memory live then (values sharing a place are one buffer), with the place's bytes."""
    timed_bytes: int
    """The bytes of all non-resident allocations of the main space (live or not at `time`)."""


def temporaries_peak(allocations: list[Allocation], ranges: dict[tuple[str, str], tuple[int, int]], color: int = 0) -> Peak:
    """The moment the non-resident allocations (temporaries, outputs) of memory space `color` hold
    the most live bytes, and the values live then. Values live together at one place (allocation,
    offset) are one buffer (an in-place update, a bitcast): the largest counts; a value overlapping
    one at a lower offset counts only the bytes beyond it."""
    places: dict[tuple[int, int], list[tuple[Value, int, int]]] = {}
    timed = 0
    for a in allocations:
        if a.color != color or a.resident:
            continue
        timed += a.size
        for v in a.values:
            span = ranges.get((v.name, v.index))
            if span is not None:
                places.setdefault((a.number, v.offset), []).append((v, *span))
    if not places:
        return Peak(time=None, live=[], timed_bytes=timed)
    end = max(e for spans in places.values() for _, _, e in spans) + 2
    delta = np.zeros(end + 1, dtype=np.int64)
    for spans in places.values():  # per place, the largest value live in each stretch of time
        spans.sort(key=lambda span: span[1])
        bounds = sorted({s for _, s, _ in spans} | {e + 1 for _, _, e in spans})
        heap: list[tuple[int, int]] = []
        i = 0
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            while i < len(spans) and spans[i][1] <= lo:
                heapq.heappush(heap, (-spans[i][0].size, spans[i][2]))
                i += 1
            while heap and heap[0][1] < lo:  # the largest has ended: drop it (smaller ended ones go when on top)
                heapq.heappop(heap)
            size = -heap[0][0] if heap else 0
            delta[lo] += size
            delta[hi] -= size
    time = int(np.argmax(np.cumsum(delta)))
    live, covered = [], {}
    for (number, offset), spans in sorted(places.items(), key=lambda kv: kv[0]):
        now = [v for v, s, e in spans if s <= time <= e]
        if not now:
            continue
        value = max(now, key=lambda v: v.size)  # bytes not already held by a value at a lower offset (tuples, sub-buffers)
        start = max(offset, covered.get(number, 0))
        if offset + value.size > start:
            live.append((value, offset + value.size - start))
            covered[number] = offset + value.size
    return Peak(time=time, live=live, timed_bytes=timed)
