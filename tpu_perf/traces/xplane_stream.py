"""One XSpace file read a plane at a time, and a plane's lines one at a time, as columns.

A pod capture is one file per host of tens of MB; parsing a whole XSpace into messages costs
several times its size. Here only one plane's bytes are held (read from the file by its length
prefix), its metadata is parsed once, and each line is parsed on its own into numpy columns of
metadata ids and times: names, FLOPs and categories are looked up once per metadata id, never
once per event. Lines that cannot hold a wanted stat (its id's bytes do not occur in the line) are
never walked event by event for stats.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
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


class DamagedXSpace(ValueError):
    """An event or stat whose bytes do not decode (the caller names the file)."""


_PAD = bytes(16)  # after the last event: a varint or fixed64 read at its end stays in the buffer
_BATCH_BYTES = 1 << 24
"""Lines are decoded together until their events hold this many bytes: numpy's per-call cost is
paid once per batch, not once per line (a capture has hundreds of small lines), and a batch's
columns stay a bounded multiple of it."""


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each of `pos` in `buf` (uint8), all at once: (values as uint64, the positions after them)."""
    first = buf[pos]
    val = (first & 0x7F).astype(np.uint64)
    after = pos + 1
    todo = np.flatnonzero(first >= 0x80)  # most keys and ids are one byte: one gather, no per-round indexing
    if not len(todo):
        return val, after
    for k in range(1, 10):
        b = buf[after[todo]]
        val[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        after[todo] += 1
        todo = todo[b >= 0x80]
        if not len(todo):
            return val, after
    raise DamagedXSpace("a varint longer than 10 bytes")


def _walk(buf: np.ndarray, start: np.ndarray, stop: np.ndarray, wanted: tuple[int, ...]) -> dict[int, tuple[np.ndarray, ...]]:
    """The fields of every message `buf[start[i]:stop[i]]`, walked in lockstep (one numpy pass per
    field position, not one Python step per message). For each field number in `wanted`:
    (message index, wire type, value, value start) in the order met, a message's own fields in
    their order; `value` is the varint, the fixed64's bits, or a length-delimited field's length."""
    got: dict[int, list[tuple[np.ndarray, ...]]] = {f: [] for f in wanted}
    idx = np.flatnonzero(start < stop)
    pos, stop = start[idx], stop[idx]
    while len(idx):
        key, pos = _varints(buf, pos)
        num, wire = (key >> np.uint64(3)).astype(np.int64), (key & np.uint64(7)).astype(np.int64)
        value, at = np.zeros(len(idx), dtype=np.uint64), pos.copy()
        if (var := wire == 0).any():
            value[var], pos[var] = _varints(buf, pos[var])
        if (ln := wire == _LEN).any():
            value[ln], at[ln] = _varints(buf, pos[ln])
            pos[ln] = at[ln] + value[ln].astype(np.int64)
        if (f64 := wire == 1).any():
            value[f64] = buf[pos[f64][:, None] + np.arange(8)].view("<u8").ravel()
            pos[f64] += 8
        f32 = wire == 5
        pos[f32] += 4
        if not (var | ln | f64 | f32).all():
            raise DamagedXSpace(f"wire type {int(wire[~(var | ln | f64 | f32)][0])} in an event")
        for f in wanted:
            if (m := num == f).any():
                got[f].append((idx[m], wire[m], value[m], at[m]))
        if (pos > stop).any():
            raise DamagedXSpace("a field runs past the end of its event")
        more = pos < stop
        idx, pos, stop = idx[more], pos[more], stop[more]
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    return {f: tuple(np.concatenate(c) for c in zip(*parts, strict=True)) if parts else empty for f, parts in got.items()}


_NEXT_EVENT_FIELD = np.isin(np.arange(256), [0x10, 0x18, 0x22, 0x28])
"""By byte: whether it is the key of a field an XEvent has after its metadata_id."""


def _scan(buf: np.ndarray, ends: np.ndarray, events: np.ndarray, stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which messages of `buf` (joined, message i ending at ends[i]) can hold an XEvent with one of
    the metadata ids `events`, and which an XStat with one of `stats`: (per message, per message).

    Both start with field 4 (0x22), a length, then their metadata_id (field 1, 0x08). An event of a
    wanted id must go on with its next field (offset, duration, a stat or num_occurrences: 0x10,
    0x18, 0x22, 0x28) or end there; an XStat goes on with its value (without that test, stats whose
    ids equal a marker's made 41 of a v6e host plane's 122 lines decoded for one that held it).
    Every candidate position is tested at once in numpy: a regex per line cost 4 ms of a 0.9 MB
    capture's 50 (it stops at every 0x22, the byte each event and stat starts with). A false hit
    costs only a decode; no holder is missed."""
    n = len(buf) - len(_PAD)
    p = np.flatnonzero(buf[:n] == 0x22)
    ev_hit, st_hit = np.zeros(len(ends), dtype=bool), np.zeros(len(ends), dtype=bool)
    ok = np.ones(len(p), dtype=bool)  # the length's bytes so far continue
    for extra in range(3 if len(events) else 2):  # continuation bytes of the length (an XStat's is at most 2 bytes)
        last = buf[p + 1 + extra]
        at = np.flatnonzero(ok & (last < 0x80) & (buf[p + 2 + extra] == 0x08))
        ok &= last >= 0x80
        q = p[at] + 3 + extra  # where the metadata id starts
        for wanted, hit, is_event in ((stats, st_hit, False), (events, ev_hit, True)):
            if not len(q) or not len(wanted) or (extra > 1 and not is_event):
                continue
            cand = q[_first_bytes(wanted)[buf[q]]]  # the id's first byte first: few pass
            ids, after = _varints(buf, cand)
            match = np.isin(ids, wanted)
            if is_event:  # then its next field, or the event's end (an event of its id alone)
                match &= _NEXT_EVENT_FIELD[buf[after]] | ((buf[cand - 2].astype(np.int64) == after - cand + 1) if extra == 0 else False)
            hit[np.searchsorted(ends, cand[match], side="right")] = True
    return ev_hit, st_hit


def _first_bytes(ids: np.ndarray) -> np.ndarray:
    """A table of 256: whether a byte is the first of one of the ids' varints."""
    table = np.zeros(256, dtype=bool)
    table[np.where(ids >= 0x80, (ids & np.uint64(0x7F)) | np.uint64(0x80), ids).astype(np.uint8)] = True
    return table


def _holders(raws: list[memoryview], events: Collection[int], stats: Collection[int]) -> tuple[np.ndarray, np.ndarray]:
    """_scan over lines, joined a batch at a time (_BATCH_BYTES): (may hold an event of `events`, may hold a stat of `stats`) per line."""
    ev_ids, st_ids = np.fromiter(events, dtype=np.uint64), np.fromiter(stats, dtype=np.uint64)
    ev_hit, st_hit = np.zeros(len(raws), dtype=bool), np.zeros(len(raws), dtype=bool)
    if not len(ev_ids) and not len(st_ids):
        return ev_hit, st_hit
    lo = 0
    while lo < len(raws):
        hi, size = lo, 0
        while hi < len(raws) and (hi == lo or size + len(raws[hi]) <= _BATCH_BYTES):
            size += len(raws[hi])
            hi += 1
        lens = np.fromiter(map(len, raws[lo:hi]), dtype=np.int64, count=hi - lo)
        ev, st = _scan(np.frombuffer(b"".join([*raws[lo:hi], _PAD]), dtype=np.uint8), np.cumsum(lens), ev_ids, st_ids)
        ev_hit[lo:hi], st_hit[lo:hi] = ev, st
        lo = hi
    return ev_hit, st_hit


def _column(n: int, rows: tuple[np.ndarray, ...]) -> np.ndarray:
    """One field of n messages as int64 (0 where absent, as protobuf reads it; the last occurrence wins)."""
    out = np.zeros(n, dtype=np.int64)
    out[rows[0]] = rows[2].view(np.int64)
    return out


@dataclass(frozen=True)
class Line:
    """One XLine as columns: event metadata ids, start and duration in ns; `stats[name]` per event
    (an object array, None where absent)."""

    name: str
    metadata_id: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    stats: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Plane:
    """A plane's name, stats and metadata, with its lines left as bytes until read."""

    name: str
    stats: dict[str, Any]
    event_names: dict[int, str]
    stat_ids: dict[str, int]
    stat_names: dict[int, str]
    _lines: list[tuple[str, memoryview]]
    _event_metadata: Any = None
    """The plane's XEventMetadata by id: their stats are read when asked for (event_stats)."""
    _event_stats: dict[int, dict[str, Any]] = field(default_factory=dict)

    def event_stats(self, metadata_id: int) -> dict[str, Any]:
        """The stats of one event metadata (FLOPs, bytes, category of an op), by stat name; read
        once per id asked for (a device plane's op metadata holds thousands of stats, most never asked for)."""
        got = self._event_stats.get(metadata_id)
        if got is None:
            meta = self._event_metadata.get(metadata_id) if self._event_metadata is not None else None
            got = {self.stat_names.get(s.metadata_id, ""): stat_value(s, self.stat_names) for s in meta.stats} if meta is not None else {}
            self._event_stats[metadata_id] = got
        return got

    @property
    def line_names(self) -> list[str]:
        return [name for name, _ in self._lines]

    def lines(self, *, stats: tuple[str, ...] = (), when: tuple[str, ...] | None = None,
              duration_stat: str | None = None, duration_lines: Collection[str] | None = None, only: set[str] | None = None,
              events: Collection[int] | None = None) -> Iterator[Line]:
        """Each line in order as columns, with the per-event `stats` named (others are never read).

        Stats are read only on lines where one of `when` (default: `stats`) can occur; the stat
        named `duration_stat` (in ps) replaces the event's duration where present (on the lines named in
        `duration_lines`; default all); `only` picks lines by name;
        `events` (metadata ids) keeps only lines where one of them or a `when` stat can occur (a
        host plane's hundred thread lines mostly hold neither: they are never decoded).
        Lines are decoded in batches (_BATCH_BYTES), each batch's events all at once."""
        dur = (duration_stat,) if duration_stat else ()
        want = {self.stat_ids[s]: s for s in (*stats, *dur) if s in self.stat_ids}
        triggers = [self.stat_ids[s] for s in (*(stats if when is None else when), *dur) if s in self.stat_ids]
        picked = [(name, raw) for name, raw in self._lines if only is None or name in only]
        ev_hit, st_hit = _holders([raw for _, raw in picked], events or (), triggers)
        batch: list[tuple[str, memoryview, bool]] = []
        size = 0
        for (name, raw), has_event, has_stat in zip(picked, ev_hit.tolist(), st_hit.tolist(), strict=True):
            if events is not None and not (has_event or has_stat):
                continue
            batch.append((name, raw, has_stat and bool(want)))
            size += len(raw)
            if size >= _BATCH_BYTES:
                yield from self._decode(batch, want, stats, duration_stat, duration_lines)
                batch, size = [], 0
        if batch:
            yield from self._decode(batch, want, stats, duration_stat, duration_lines)

    def _decode(self, batch: list[tuple[str, memoryview, bool]], want: dict[int, str],
                asked: tuple[str, ...], duration_stat: str | None, duration_lines: Collection[str] | None) -> Iterator[Line]:
        """The lines of one batch (name, bytes, whether its stats are read): their events' bytes
        joined, every event's fields decoded at once."""
        cls = messages()["XLineEvents"]
        parsed = [cls.FromString(raw) for _, raw, _ in batch]
        events = [e for m in parsed for e in m.events]
        lens = np.fromiter(map(len, events), dtype=np.int64, count=len(events))
        buf = np.frombuffer(b"".join([*events, _PAD]), dtype=np.uint8)
        del events
        stop = np.cumsum(lens)
        first = np.concatenate([[0], np.cumsum([len(m.events) for m in parsed])]).astype(np.int64)
        stat_lines = [read for _, _, read in batch]
        fields = _walk(buf, stop - lens, stop, (1, 2, 3, 4) if any(stat_lines) else (1, 2, 3))
        mids, offs, durs = (_column(len(lens), fields[f]) for f in (1, 2, 3))
        by_stat: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if any(stat_lines):
            line_of = np.repeat(np.arange(len(batch)), np.diff(first))
            ev, _, length, at = fields[4]
            keep = np.asarray(stat_lines)[line_of[ev]]
            by_stat = self._stats(buf, ev[keep], at[keep], length[keep].astype(np.int64), want)
        for k, ((name, _, _), msg) in enumerate(zip(batch, parsed, strict=True)):
            a, b = int(first[k]), int(first[k + 1])
            dur = (durs[a:b] // 1000).astype(np.float64)  # whole ns, as XProf's ProfileData gives them: picoseconds truncated
            per_event: dict[str, np.ndarray] = {}
            for sname, (ev, numeric, values) in by_stat.items():
                lo, hi = np.searchsorted(ev, (a, b))
                if sname == duration_stat and (duration_lines is None or name in duration_lines):
                    ok = ~np.isnan(numeric[lo:hi])
                    dur[ev[lo:hi][ok] - a] = numeric[lo:hi][ok] / 1e3
                if sname in asked:
                    col = np.full(b - a, None, dtype=object)
                    col[ev[lo:hi] - a] = values[lo:hi]
                    per_event[sname] = col
            yield Line(name, mids[a:b], (msg.timestamp_ns + offs[a:b] // 1000).astype(np.float64), dur, per_event)

    def _stats(self, buf: np.ndarray, ev: np.ndarray, at: np.ndarray, length: np.ndarray,
               want: dict[int, str]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The `want` stats among the XStats at `buf[at:at+length]` (owned by events `ev`): per stat name,
        (event, numeric value or NaN, value as XProf reads it), sorted by event, one per event (the last)."""
        f = _walk(buf, at, at + length, (1, 2, 3, 4, 5, 6, 7))
        sid = _column(len(ev), f[1])
        kind = np.zeros(len(ev), dtype=np.int64)  # the value field set last (a oneof): 0 none, else its number
        bits = np.zeros(len(ev), dtype=np.uint64)
        span = np.zeros((len(ev), 2), dtype=np.int64)
        for num in range(2, 8):
            rows, _, value, start = f[num]
            kind[rows], bits[rows] = num, value
            span[rows] = np.stack([start, start + value.astype(np.int64)], axis=1)
        out = {}
        for i, name in want.items():
            rows = np.flatnonzero(sid == i)
            order = np.argsort(ev[rows], kind="stable")
            rows = rows[order]
            last = np.r_[ev[rows][1:] != ev[rows][:-1], True] if len(rows) else np.zeros(0, dtype=bool)
            rows = rows[last]
            k, v = kind[rows], bits[rows]
            numeric = np.full(len(rows), np.nan)
            numeric[k == 2] = v[k == 2].view(np.float64)
            numeric[k == 3] = v[k == 3].astype(np.float64)
            numeric[k == 4] = v[k == 4].view(np.int64).astype(np.float64)
            values = np.full(len(rows), None, dtype=object)
            for num, conv in ((2, v.view(np.float64)), (3, v), (4, v.view(np.int64))):
                values[k == num] = conv[k == num].tolist()
            for j in np.flatnonzero((k == 5) | (k == 6) | (k == 7)):
                r = rows[j]
                if k[j] == 7:
                    values[j] = self.stat_names.get(int(v[j]))
                else:
                    raw = buf[span[r, 0]:span[r, 1]].tobytes()
                    values[j] = raw.decode("utf-8", "replace") if k[j] == 5 else raw
            out[name] = (ev[rows], numeric, values)
        return out


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
    return Plane(
        name=plane.name, stats={stat_names.get(s.metadata_id, ""): stat_value(s, stat_names) for s in plane.stats},
        event_names={k: m.name for k, m in plane.event_metadata.items()},
        stat_ids={v: k for k, v in stat_names.items()}, stat_names=stat_names, _lines=lines, _event_metadata=plane.event_metadata,
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
