"""One XSpace file read a plane at a time, and a plane's lines one at a time, as columns.

A pod capture is one file per host of tens of MB; parsing a whole XSpace into messages costs
several times its size. Here only one plane's bytes are held (read from the file by its length
prefix), its metadata is parsed once, and each line is parsed on its own into numpy columns of
metadata ids and times: names, FLOPs and categories are looked up once per metadata id, never
once per event. Lines that cannot hold a wanted stat (its id's bytes do not occur in the line) are
never walked event by event for stats.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from tpu_perf.errors import DataError
from tpu_perf.traces.xplane_proto import messages

_LEN = 2  # protobuf wire type of length-delimited fields


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _skip(buf: memoryview, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == _LEN:
        n, pos = _varint(buf, pos)
        return pos + n
    if wire == 5:
        return pos + 4
    raise ValueError(f"unsupported wire type {wire}")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, key start, value start, end) of each top-level field."""
    pos, end = 0, len(buf)
    while pos < end:
        head = pos
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == _LEN:
            n, pos = _varint(buf, pos)
            yield num, wire, head, pos, pos + n
            pos += n
        else:
            nxt = _skip(buf, pos, wire)
            yield num, wire, head, pos, nxt
            pos = nxt
    if pos != end:
        raise ValueError("a field runs past the end of its message")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def breakdown_bytes(data: bytes) -> float:
    """Bytes summed over a `memory_access_breakdown` stat (a serialized MemoryAccessBreakdown:
    repeated field 1, each with `bytes_accessed` as field 3): what XProf's op_profile counts."""
    total = 0
    buf = memoryview(data)
    for num, _, _, start, end in _fields(buf):
        if num == 1:
            for inner, wire, _, s, _e in _fields(buf[start:end]):
                if inner == 3 and wire == 0:
                    total += _varint(buf[start:end], s)[0]
    return float(total)


def stat_value(stat: Any, stat_names: dict[int, str]) -> Any:
    """An XStat's value; a `ref_value` is the name of the stat metadata it points to (as XProf reads it)."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value)
    return getattr(stat, kind)


@dataclass(frozen=True)
class Line:
    """One XLine as columns: event metadata ids, start and duration in ns; `stats[name]` per event (None where absent)."""

    name: str
    metadata_id: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    stats: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class Plane:
    """A plane's name, stats and metadata, with its lines left as bytes until read."""

    name: str
    stats: dict[str, Any]
    event_names: dict[int, str]
    event_stats: dict[int, dict[str, Any]]
    stat_ids: dict[str, int]
    stat_names: dict[int, str]
    _lines: list[tuple[str, memoryview]]

    @property
    def line_names(self) -> list[str]:
        return [name for name, _ in self._lines]

    def lines(self, *, stats: tuple[str, ...] = (), when: tuple[str, ...] | None = None,
              duration_stat: str | None = None, only: set[str] | None = None) -> Iterator[Line]:
        """Each line in order as columns, with the per-event `stats` named (others are never read).

        Stats are read only on lines where one of `when` (default: `stats`) can occur; the stat
        named `duration_stat` (in ps) replaces the event's duration where present; `only` picks lines by name."""
        ids = {self.stat_ids[s]: s for s in stats if s in self.stat_ids}
        triggers = [self.stat_ids[s] for s in (stats if when is None else when) if s in self.stat_ids]
        # an event's XStat is field 4 (0x22), a short length, then its metadata_id (field 1, 0x08)
        needle = re.compile(b"\\x22(?:[\\x00-\\x7f]|[\\x80-\\xff][\\x00-\\x7f])\\x08(?:" + b"|".join(re.escape(_encode_varint(i)) for i in triggers) + b")") if triggers else None
        cls = messages()["XLine"]
        for name, raw in self._lines:
            if only is not None and name not in only:
                continue
            line = cls.FromString(raw)
            events = line.events
            mids = np.fromiter((e.metadata_id for e in events), dtype=np.int64, count=len(events))
            # whole ns, as XProf's ProfileData gives them: picoseconds truncated
            offs = np.fromiter((e.offset_ps for e in events), dtype=np.int64, count=len(events)) // 1000
            durs = (np.fromiter((e.duration_ps for e in events), dtype=np.int64, count=len(events)) // 1000).astype(np.float64)
            per_event: dict[str, list[Any]] = {}
            if ids and needle is not None and needle.search(raw):  # the stat's bytes absent from the line: no event holds it
                per_event = {name: [None] * len(events) for name in ids.values()}
                for i, e in enumerate(events):
                    for st in e.stats:
                        name = ids.get(st.metadata_id)
                        if name is not None:
                            per_event[name][i] = stat_value(st, self.stat_names)
            if duration_stat and per_event.get(duration_stat) is not None:
                got = np.array([np.nan if v is None else float(v) for v in per_event[duration_stat]], dtype=np.float64)
                durs = np.where(np.isnan(got), durs, got / 1e3)
            yield Line(line.name, mids, (line.timestamp_ns + offs).astype(np.float64), durs, per_event)


def _line_name(buf: memoryview) -> str:
    """An XLine's name from the fields before its events (serializers write fields in number order)."""
    for num, wire, _, start, end in _fields(buf):
        if num == 2 and wire == _LEN:
            return bytes(buf[start:end]).decode("utf-8", "replace")
        if num == 4:
            break
    return str(messages()["XLine"].FromString(buf).name)


def _plane(buf: memoryview) -> Plane:
    lines, rest = [], []
    for num, wire, head, start, end in _fields(buf):
        if num == 3 and wire == _LEN:
            lines.append((_line_name(buf[start:end]), buf[start:end]))
        else:
            rest.append(buf[head:end])
    plane = messages()["XPlane"].FromString(b"".join(rest))
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    event_stats = {k: {stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in m.stats} for k, m in plane.event_metadata.items() if m.stats}
    return Plane(
        name=plane.name, stats={stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in plane.stats},
        event_names={k: m.name for k, m in plane.event_metadata.items()}, event_stats=event_stats,
        stat_ids={v: k for k, v in stat_names.items()}, stat_names=stat_names, _lines=lines,
    )


def _read_varint(f: IO[bytes]) -> int | None:
    result = shift = 0
    while True:
        b = f.read(1)
        if not b:
            if shift:
                raise ValueError("the file ends inside a field header")
            return None
        result |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return result
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _check_message_head(f: IO[bytes]) -> None:
    """Peek at a plane's first field header: a protobuf message starts with a field number >= 1 and
    a wire type it has. A run of NUL bytes (a sparse file) or noise fails here, before the plane's
    declared length is read into memory."""
    at = f.tell()
    key = _read_varint(f)
    f.seek(at)
    if key is None or key >> 3 == 0 or key & 7 not in (0, 1, 2, 5):
        raise ValueError(f"the plane at byte {at} does not start with a protobuf field (key {key})")


@dataclass
class SpaceInfo:
    """What an XSpace says beside its planes (filled while its planes are read)."""

    hostnames: list[str] = field(default_factory=list)
    plane_names: list[str] = field(default_factory=list)


def planes(path: Path, info: SpaceInfo | None = None) -> Iterator[Plane]:
    """The planes of one `.xplane.pb`, one at a time (only that plane's bytes in memory).

    A damaged, truncated or empty file raises a one-line DataError naming it."""
    path = Path(path)
    info = info if info is not None else SpaceInfo()
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{path}: empty file; re-capture the trace (it holds no XSpace)")
    try:
        with open(path, "rb") as f:
            while (key := _read_varint(f)) is not None:
                num, wire = key >> 3, key & 7
                if wire != _LEN or num == 0:
                    raise ValueError(f"field {num} has wire type {wire}, an XSpace has none such")
                n = _read_varint(f)
                if n is not None and n > size - f.tell():  # checked before a byte is allocated
                    raise ValueError(f"field {num} at byte {f.tell()} declares {n:,} bytes, but only {size - f.tell():,} remain in the file")
                if n and num == 1:
                    _check_message_head(f)
                data = f.read(n) if n is not None else b""
                if n is None or len(data) != n:
                    raise ValueError("the file ends inside a field")
                if num == 1:
                    plane = _plane(memoryview(data))
                    info.plane_names.append(plane.name)
                    yield plane
                elif num == 4:
                    info.hostnames.append(data.decode("utf-8", "replace"))
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable XSpace ({exc}); the file is truncated or damaged") from None
    except Exception as exc:  # protobuf's DecodeError
        if type(exc).__name__ != "DecodeError":
            raise
        raise DataError(f"{path}: not a readable XSpace ({type(exc).__name__}: {exc}); the file is truncated or damaged") from None
    if not info.plane_names:
        raise DataError(f"{path}: the XSpace holds no planes; re-capture the trace")
