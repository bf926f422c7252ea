"""Stream a Kineto (Chrome-trace) JSON file into column lists of its complete ('X') events.

Fast path: the `traceEvents` array is cut into windows of many events, and each window is decoded
in one call by msgspec into typed structs that keep only the fields the tables need (the `args`
lists and strings are skipped without building Python objects). A window ends at a candidate
event boundary `}`, `,`, `{`; that the candidate is a real boundary (not inside a string or a
nested object) is *proven* by the window decoding as a complete JSON array: JSON is read left to
right, so a cut inside a string or an open object can never close with the `]` added after it.

Anything the fast path cannot prove falls back, window by window, to the standard library: values
msgspec's types refuse (a float pid, a string device) are decoded by `json.loads`; a window that
does not decode is read event by event with `JSONDecoder.raw_decode`, which also produces the
error message for a truly broken file. Memory stays bounded by the window size.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings
import zlib
from array import array
from pathlib import Path
from typing import Any

import pandas as pd

from tpu_perf.errors import DataError

try:  # the `traces` extra; without it every window takes the json.loads path
    import msgspec
except ImportError:  # pragma: no cover - exercised by forcing FAST_DECODE off in the tests
    msgspec = None

WINDOW_BYTES = 1 << 22
"""Bytes of events decoded per call: large enough to amortise the call, small for memory."""
BOMB_RATIO, BOMB_FLOOR_BYTES = 100, 1 << 30
"""A gzip trace that gives more than 100 bytes per compressed byte once past 1 GiB is refused (JSON
traces compress 5-30x; gzip's own limit is about 1000x)."""
MAX_VALUE_BYTES = 1 << 26
"""The largest single JSON value (one event, one header entry) read: 64 MiB. A value that does not
end by then (an unterminated string, a file of NUL bytes) is damage, not a trace."""
FAST_DECODE = msgspec is not None
_SKIP = re.compile(rb"[ \t\r\n,]*")
_WS = b" \t\r\n"
_DECODER = json.JSONDecoder()
COLUMNS = ("name", "cat", "pid", "tid", "ts", "dur", "device")

if msgspec is not None:

    class _Args(msgspec.Struct, gc=False):
        device: int | None = None

    class _Event(msgspec.Struct, gc=False):
        ph: str | None = None
        name: str = ""
        cat: str = ""
        pid: int | str = ""
        tid: int | str = ""
        ts: float | None = 0.0
        dur: float | None = 0.0
        args: _Args | None = None

    _FAST = msgspec.json.Decoder(list[_Event])


class _Columns:
    """Column lists of the 'X' events; names and categories interned (they repeat a lot)."""

    def __init__(self) -> None:
        self.cols: dict[str, Any] = {k: array("d") if k in ("ts", "dur") else [] for k in COLUMNS}
        self.intern: dict[Any, Any] = {}

    def add_structs(self, events: list[Any]) -> None:
        evs = [e for e in events if e.ph == "X"]
        c, keep = self.cols, self.intern.setdefault
        c["name"] += [keep(e.name, e.name) for e in evs]
        c["cat"] += [keep(e.cat, e.cat) for e in evs]
        c["pid"] += [keep(e.pid, e.pid) for e in evs]
        c["tid"] += [keep(e.tid, e.tid) for e in evs]
        nan = math.nan
        c["ts"].extend([nan if e.ts is None else e.ts for e in evs])
        c["dur"].extend([nan if e.dur is None else e.dur for e in evs])
        c["device"] += [None if e.args is None else e.args.device for e in evs]

    def add_dict(self, ev: Any) -> None:
        """One event as the standard library decoded it (any JSON types)."""
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            return
        c, keep = self.cols, self.intern.setdefault
        name, cat = _text(ev.get("name", "")), _text(ev.get("cat", ""))
        c["name"].append(keep(name, name))
        c["cat"].append(keep(cat, cat))
        pid, tid = str(ev.get("pid", "")), str(ev.get("tid", ""))
        c["pid"].append(keep(pid, pid))
        c["tid"].append(keep(tid, tid))
        c["ts"].append(_number(ev.get("ts", 0.0)))
        c["dur"].append(_number(ev.get("dur", 0.0)))
        args = ev.get("args")
        c["device"].append(args.get("device") if isinstance(args, dict) else None)

    def fast(self, data: bytes) -> bool | None:
        """Decode `data` (whole events and separators) as one array with msgspec: True when done,
        None when it is valid JSON of other types (a float pid), False when msgspec cannot read it."""
        if not FAST_DECODE:
            return None
        try:
            self.add_structs(_FAST.decode(b"[" + data + b"]"))
            return True
        except msgspec.ValidationError:
            return None
        except msgspec.DecodeError:
            return False  # not an array of whole events (or NaN/Infinity, which only the stdlib reads)

    def stdlib(self, data: bytes) -> bool:
        """The same with the standard library's json.loads; False when it is not an array either."""
        try:
            events = json.loads(b"[" + data + b"]")
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            try:
                events = json.loads((b"[" + data + b"]").decode("utf-8", "replace"))
            except (json.JSONDecodeError, RecursionError):
                return False
        for ev in events:
            self.add_dict(ev)
        return True


def _number(value: Any) -> float:
    """A timestamp as a float; NaN when it is not a number (as pandas' to_numeric coerces)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(pd.to_numeric(pd.Series([value], dtype="object"), errors="coerce").astype(float).iloc[0])


def _text(value: Any) -> str:
    """A name as text; bytes that were not UTF-8 become U+FFFD (they were kept as surrogates)."""
    s = str(value)
    if s.isascii():
        return s
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


def _boundary(buf: bytes, lo: int, hi: int | None = None) -> int:
    """Index just after the last `}` in buf[lo:hi] that is followed by `,` and `{` (blanks between), or -1."""
    hi = len(buf) if hi is None else hi
    while True:
        i = buf.rfind(b"{", lo + 1, hi)
        if i < 0:
            return -1
        j = i - 1
        while j > lo and buf[j] in _WS:
            j -= 1
        if buf[j] == 44:  # ','
            j -= 1
            while j > lo and buf[j] in _WS:
                j -= 1
            if buf[j] == 125:  # '}'
                return j + 1
        hi = i


class _Reader:
    """A growing byte window over a (possibly gzip) file."""

    def __init__(self, path: Path, max_bytes: int | None = None) -> None:
        self.path = path
        with open(path, "rb") as f:
            magic = f.read(2)
        self.gzip = magic == b"\x1f\x8b"
        self.f = gzip.open(path, "rb") if self.gzip else open(path, "rb")  # noqa: SIM115
        self.buf, self.pos, self.eof = b"", 0, False
        self.read_bytes, self.max_bytes = 0, max_bytes

    def more(self) -> None:
        try:
            data = self.f.read(WINDOW_BYTES)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{self.path}: cannot be decompressed ({exc}); the file is truncated or damaged") from None
        self.read_bytes += len(data)
        if self.gzip and self.read_bytes > BOMB_FLOOR_BYTES and self.read_bytes > BOMB_RATIO * self.f.fileobj.tell():
            raise DataError(f"{self.path}: decompresses to over {BOMB_RATIO}x its size ({self.read_bytes >> 20} MiB from {self.f.fileobj.tell() >> 20} MiB); no trace compresses so well, the file is damaged or a gzip bomb")
        if self.max_bytes is not None and self.read_bytes > self.max_bytes:
            what = "decompresses to" if self.gzip else "holds"
            raise DataError(f"{self.path}: {what} more than --max-bytes {self.max_bytes / 1e9:.2f} GB; give a larger --max-bytes if this machine has the memory")
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        self.eof = not data

    def skip(self) -> bytes:
        """Skip blanks and commas; return the next byte (b'' at the end)."""
        while True:
            self.pos = _SKIP.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self.more()

    def expect(self, char: bytes) -> None:
        found = self.skip()
        if found == b"" and not self.buf:
            raise DataError(f"{self.path}: empty file; it holds no trace")
        if found != char:
            raise DataError(f"{self.path}: not a Chrome-trace JSON object (expected {char.decode()!r} at byte {self.pos}); is it a Kineto trace?")
        self.pos += 1

    def value(self) -> Any:
        """One JSON value by the standard library, decoding a growing slice after `pos`."""
        self.skip()
        size = 1 << 12
        while True:
            stop = min(len(self.buf), self.pos + size)
            text = self.buf[self.pos : stop].decode("utf-8", "surrogateescape")
            whole = stop == len(self.buf) and self.eof
            try:
                value, end = _DECODER.raw_decode(text)
                if end < len(text) or whole:
                    self.pos += len(text[:end].encode("utf-8", "surrogateescape"))
                    return value
            except json.JSONDecodeError as exc:
                if whole:
                    raise DataError(f"{self.path}: truncated or invalid JSON ({exc.msg} near byte {self.pos + exc.pos}); re-export the trace") from None
            except RecursionError:
                raise DataError(f"{self.path}: JSON nested too deeply near byte {self.pos}") from None
            if stop - self.pos >= MAX_VALUE_BYTES:
                raise DataError(f"{self.path}: a JSON value near byte {self.read_bytes - len(self.buf) + self.pos} does not end within {MAX_VALUE_BYTES >> 20} MiB (an unterminated string or a damaged file); re-export the trace")
            if stop == len(self.buf):
                self.more()
            size *= 2

    def close(self) -> None:
        self.f.close()


def _events(r: _Reader, out: _Columns) -> None:
    """The traceEvents array, from just after its `[` to just after its `]`."""
    slow_until = -1
    while True:
        c = r.skip()
        if c == b"]":
            r.pos += 1
            return
        if c == b"":
            raise DataError(f"{r.path}: truncated JSON (the trace ends inside traceEvents); re-export the trace")
        if r.pos >= slow_until:
            if len(r.buf) - r.pos < WINDOW_BYTES and not r.eof:
                r.more()
            split = _boundary(r.buf, r.pos)
            if split > 0:
                done = out.fast(r.buf[r.pos : split])
                if done is False:  # the last candidate may sit in the header after the events
                    prev = _boundary(r.buf, r.pos, split - 1)
                    if prev > 0 and out.fast(r.buf[r.pos : prev]):
                        r.pos = prev
                        continue
                if done or out.stdlib(r.buf[r.pos : split]):
                    r.pos = split
                    continue
                slow_until = split  # not proven: event by event up to there
        out.add_dict(r.value())


def scan(path: Path, *, max_bytes: int | None = None) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Header keys (everything but the events) and column lists of the complete ('X') events;
    a DataError once more than `max_bytes` were read (decompressed), or one value passes 64 MiB."""
    header: dict[str, Any] = {}
    out = _Columns()
    r = _Reader(Path(path), max_bytes)
    try:
        r.skip()
        if r.buf.startswith(b"\xef\xbb\xbf", r.pos):
            r.pos += 3
        r.expect(b"{")
        while r.skip() not in (b"}", b""):
            key = r.value()
            r.expect(b":")
            if key != "traceEvents":
                header[str(key)] = r.value()
                continue
            r.expect(b"[")
            _events(r, out)
        if r.skip() != b"}":
            raise DataError(f"{path}: truncated JSON (the trace ends before its closing brace); re-export the trace")
    finally:
        r.close()
    return header, _valid_times(Path(path), out.cols)


class InvalidEventsWarning(UserWarning):
    """Events whose time or duration is outside its domain were dropped from a trace (one line)."""


MAX_EVENT_US = 7 * 24 * 3600 * 1e6
"""No event lasts a week: a longer duration is damage (Kineto times are microseconds)."""


def _valid_times(path: Path, cols: dict[str, Any]) -> dict[str, Any]:
    """The columns without events whose start is not finite, or whose duration is negative,
    infinite or over a week; a warning says how many were dropped. Never summarised."""
    import numpy as np

    ts, dur = np.frombuffer(cols["ts"], dtype=float), np.frombuffer(cols["dur"], dtype=float)
    keep = np.isfinite(ts) & (np.isnan(dur) | ((dur >= 0) & (dur <= MAX_EVENT_US)))
    dropped = int(len(keep) - keep.sum())
    if not dropped:
        return cols
    first = int(np.flatnonzero(~keep)[0])
    warnings.warn(f"{path}: dropped {dropped} of {len(keep)} events whose timestamp is not finite or whose duration is negative or absurd (first: ts {float(ts[first])!r}, dur {float(dur[first])!r})", InvalidEventsWarning, stacklevel=3)
    out: dict[str, Any] = {}
    for key, values in cols.items():
        if isinstance(values, array):
            out[key] = array("d", np.frombuffer(values, dtype=float)[keep].tobytes())
        else:
            out[key] = [v for v, k in zip(values, keep, strict=True) if k]
    return out
