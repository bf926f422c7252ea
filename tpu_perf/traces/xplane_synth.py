"""Larger and multi-host XSpace captures made from a real one, for benches and tests.

A real capture is repeated in time (every line's events again, shifted by the capture's span) and
given a hostname, so a pod-sized log dir can be built on a machine without a pod. Event names,
metadata and stats are the real ones; only times repeat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpu_perf.traces.xplane_proto import messages, parse_xspace


def _span_ps(space: Any) -> int:
    lo, hi = None, None
    for plane in space.planes:
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for e in line.events:
                start = base + e.offset_ps
                lo = start if lo is None else min(lo, start)
                hi = start + e.duration_ps if hi is None else max(hi, start + e.duration_ps)
    return 0 if lo is None else hi - lo


def repeat_in_time(data: bytes, copies: int, *, stretch: float = 1.0) -> bytes:
    """The capture with every line's events repeated `copies` times back to back; `stretch` scales
    every event's duration and offset (a slower host), so numbers differ from host to host."""
    space = parse_xspace(data)
    del space.hostnames[:]
    span = int(_span_ps(space) * stretch) + 1_000_000  # 1 us apart
    for plane in space.planes:
        dur_ids = _duration_stat_ids(plane)
        for line in plane.lines:
            events = list(line.events)
            if stretch != 1.0:
                for e in events:
                    e.offset_ps = int(e.offset_ps * stretch)
                    e.duration_ps = int(e.duration_ps * stretch)
                    for st in e.stats:
                        kind = st.WhichOneof("value")
                        if st.metadata_id in dur_ids and kind in ("int64_value", "uint64_value"):
                            setattr(st, kind, int(getattr(st, kind) * stretch))
            for k in range(1, copies):
                for e in events:
                    ne = line.events.add()
                    ne.CopyFrom(e)
                    ne.offset_ps = e.offset_ps + k * span
    return space.SerializeToString()


def _duration_stat_ids(plane: Any) -> frozenset[int]:
    return frozenset(k for k, m in plane.stat_metadata.items() if m.name == "device_duration_ps")


def with_hostname(data: bytes, hostname: str) -> bytes:
    """`data` (an XSpace without hostnames) naming `hostname`: field 4 appended, the rest byte for byte."""
    host = messages()["XSpace"](hostnames=[hostname]).SerializeToString()
    return data + host


def write_pod(src: Path, out: Path, *, hosts: int, copies: int) -> list[Path]:
    """An XProf log dir `out/plugins/profile/pod/host<i>.xplane.pb`, one file per host, each `src`
    repeated `copies` times with its own hostname. Returns the files."""
    base = repeat_in_time(Path(src).read_bytes(), copies)
    session = Path(out) / "plugins" / "profile" / "pod"
    session.mkdir(parents=True, exist_ok=True)
    files = []
    for h in range(hosts):
        path = session / f"host{h:02d}.xplane.pb"
        path.write_bytes(with_hostname(base, f"host{h:02d}"))
        files.append(path)
    return files


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    n, head = len(payload), bytearray([number << 3 | 2])
    while True:
        b, n = n & 0x7F, n >> 7
        head.append(b | 0x80 if n else b)
        if not n:
            return bytes(head) + payload


def write_repeated(src: Path, out: Path, copies: int) -> None:
    """What `repeat_in_time(src, copies)` holds, written a plane at a time and each line's copies
    serialized one copy at a time (the same events, their offsets moved on in place): a 1 GB
    capture is made in minutes and in about its largest plane's size of memory, where messages for
    all of its events would not fit beside other work."""
    space = parse_xspace(Path(src).read_bytes())
    span = _span_ps(space) + 1_000_000  # 1 us apart
    xplane, xline = messages()["XPlane"], messages()["XLine"]
    with open(out, "wb") as f:
        for plane in space.planes:
            head = xplane()
            head.CopyFrom(plane)
            del head.lines[:]
            parts = [head.SerializeToString()]
            for line in plane.lines:
                base, copy = xline(), xline()
                base.CopyFrom(line)
                del base.events[:]
                copy.events.extend(line.events)
                chunks = [base.SerializeToString(), copy.SerializeToString()]  # messages joined are one message: events appended
                for _ in range(1, copies):
                    for e in copy.events:
                        e.offset_ps += span
                    chunks.append(copy.SerializeToString())
                parts.append(_field(3, b"".join(chunks)))
            f.write(_field(1, b"".join(parts)))


def main(argv: list[str] | None = None) -> None:
    """`python -m tpu_perf.traces.xplane_synth SRC OUT --mb N`: SRC repeated in time to about N MB (for benches)."""
    import argparse
    import math

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, required=True)
    args = ap.parse_args(argv)
    write_repeated(args.src, args.out, max(1, math.ceil(args.mb * 1e6 / args.src.stat().st_size)))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
