"""Shortcuts of the xplane reader hold their answers: self times that walk only overlapping events
equal a full walk, and a synthetic capture written a plane at a time equals one built whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.conftest import DATA
from tpu_perf.traces.intervals import self_times
from tpu_perf.traces.xplane_proto import parse_xspace
from tpu_perf.traces.xplane_synth import repeat_in_time, write_repeated

TPU = DATA / "tpu_v6e_x4_inference.xplane.pb"


def _walk_all(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Every event through the stack of open parents (what self_times did for every event)."""
    order = np.lexsort((-(end - start), start))
    s, e = start[order].tolist(), end[order].tolist()
    child = [0.0] * len(s)
    stack: list[int] = []
    for i, (si, ei) in enumerate(zip(s, e, strict=True)):
        while stack and e[stack[-1]] <= si:
            stack.pop()
        if not stack:
            stack.append(i)
        elif ei <= e[stack[-1]]:
            child[stack[-1]] += ei - si
            stack.append(i)
    out = np.empty(len(s))
    out[order] = np.asarray(e) - np.asarray(s) - np.asarray(child)
    return np.maximum(out, 0.0)


def test_self_times_equal_a_walk_of_every_event() -> None:
    rng = np.random.default_rng(7)
    nested = 0
    for _ in range(500):
        n = int(rng.integers(0, 30))
        start = np.round(rng.uniform(0, 40, n))
        end = start + np.round(rng.exponential(4, n)) * (rng.uniform(size=n) > 0.1)  # some zero-length
        got, want = self_times(start, end), _walk_all(start, end)
        assert np.allclose(got, want), (start, end, got, want)
        nested += int((got < end - start).any())
    assert nested > 100  # lines with nesting were tested, not only flat ones


def test_a_capture_written_a_plane_at_a_time_equals_one_built_whole(tmp_path: Path) -> None:
    out = tmp_path / "x3.xplane.pb"
    write_repeated(TPU, out, 3)
    assert parse_xspace(out.read_bytes()) == parse_xspace(repeat_in_time(TPU.read_bytes(), 3))
