"""The columnar XLine decoder against protobuf's own parse of the same bytes, on the real TPU capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from tpu_perf.errors import DataError
from tpu_perf.traces import xplane_stream
from tpu_perf.traces.xplane_proto import messages
from tpu_perf.traces.xplane_stream import planes, stat_value
from tpu_perf.traces.xspace import read_xspace

TPU = DATA / "tpu_v6e_x4_inference.xplane.pb"


@pytest.mark.parametrize("batch_bytes", [1 << 24, 5000])
def test_columns_equal_protobufs_parse_of_every_line(monkeypatch: pytest.MonkeyPatch, batch_bytes: int) -> None:
    """Every event's id, start, duration and every stat's value, on every line of every plane, as
    upb's message parse reads them; small batches split the capture's lines many ways."""
    monkeypatch.setattr(xplane_stream, "_BATCH_BYTES", batch_bytes)
    cls = messages()["XLine"]
    events = stats = 0
    for plane in planes(TPU):
        names = tuple(plane.stat_ids)
        decoded = list(plane.lines(stats=names))
        assert [ln.name for ln in decoded] == plane.line_names
        for line, (_, raw) in zip(decoded, plane._lines, strict=True):
            ref = cls.FromString(raw)
            assert line.metadata_id.tolist() == [e.metadata_id for e in ref.events]
            assert line.start_ns.tolist() == [float(ref.timestamp_ns + e.offset_ps // 1000) for e in ref.events]
            assert line.dur_ns.tolist() == [float(e.duration_ps // 1000) for e in ref.events]
            for i, e in enumerate(ref.events):
                want = {plane.stat_names[s.metadata_id]: stat_value(s, plane.stat_names) for s in e.stats}
                got = {name: col[i] for name, col in line.stats.items() if col[i] is not None}
                assert got == {k: v for k, v in want.items() if v is not None}
                stats += len(want)
            events += len(ref.events)
    assert events > 25_000 and stats > 10_000  # the capture's events and stats were all compared


def test_duration_stat_replaces_the_events_duration() -> None:
    plane = next(p for p in planes(TPU) if p.name == "/device:TPU:0")
    sid = plane.stat_ids["device_duration_ps"]
    line = next(plane.lines(duration_stat="device_duration_ps", only={"XLA Ops"}))
    ref = messages()["XLine"].FromString(dict(plane._lines)["XLA Ops"])
    want = [next((s.int64_value or s.uint64_value for s in e.stats if s.metadata_id == sid), None) for e in ref.events]
    assert sum(w is not None for w in want) > 1000
    assert line.dur_ns.tolist() == [float(e.duration_ps // 1000) if w is None else w / 1e3 for e, w in zip(ref.events, want, strict=True)]
    assert line.stats == {}  # asked for no per-event stats


def test_damaged_event_names_the_file(tmp_path: Path) -> None:
    """A line whose framing is whole but whose event runs past its end: one line naming the file."""
    m = messages()
    line = b"\x12\x07XLA Ops" + m["XLineEvents"](timestamp_ns=5, events=[b"\x08\x01\x10\x05", b"\x08\x01\x10\xff"]).SerializeToString()
    plane = m["XPlane"](id=1, name="/device:TPU:0").SerializeToString() + b"\x1a" + bytes([len(line)]) + line
    bad = tmp_path / "event.xplane.pb"
    bad.write_bytes(b"\x0a" + bytes([len(plane)]) + plane)  # written as bytes: protobuf's parse would refuse the event
    with pytest.raises(DataError, match=r"event\.xplane\.pb: not a readable XSpace \(a field runs past the end of its event\)"):
        read_xspace([bad])


def test_varints_of_every_length() -> None:
    values = [0, 1, 127, 128, 300, 2**31, 2**35 + 7, 2**63 - 1, 2**64 - 1]
    enc = [xplane_stream._encode_varint(v) for v in values]
    buf = np.frombuffer(b"".join(enc) + bytes(16), dtype=np.uint8)
    pos = np.cumsum([0] + [len(e) for e in enc[:-1]])
    got, after = xplane_stream._varints(buf, pos)
    assert got.tolist() == values
    assert after.tolist() == (pos + [len(e) for e in enc]).tolist()


def test_lines_picked_by_event_id_hold_every_such_event() -> None:
    """`events=` skips a host plane's lines without those events, and keeps every line with one."""
    host = next(p for p in planes(TPU) if p.name == "/host:CPU")
    every = list(host.lines())
    for ids in ([11, 12], [1], [min(host.event_names), max(host.event_names)]):
        holding = [ln.name for ln in every if np.isin(ln.metadata_id, ids).any()]
        picked = list(host.lines(events=ids))
        assert holding and {ln.name for ln in picked} >= set(holding)
        assert len(picked) < len(every)  # lines without them were never decoded
        for ln in picked:  # a picked line is decoded whole
            ref = next(r for r in every if r.name == ln.name)
            assert ln.metadata_id.tolist() == ref.metadata_id.tolist()
    compile_ids = [i for i, n in host.event_names.items() if n in ("backend_compile", "TfrtTpuCompiler::Compile")]
    holding = {ln.name for ln in every if np.isin(ln.metadata_id, compile_ids).any()}
    assert len(holding) == 1 and {ln.name for ln in host.lines(events=compile_ids)} == holding  # XStats with the same ids (they made 41 lines match) do not count
