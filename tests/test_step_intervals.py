"""The step tracker's interval lists (tpu_perf/collectors/steps.py), against their definitions."""

from __future__ import annotations

import random

import pytest

from tpu_perf.collectors.steps import _add, _covered, _drop_until, _first_ending_after, _overlapping


def _lists(seed: int, count: int) -> list[list[tuple[float, float]]]:
    """Sorted, disjoint interval lists built by `_add` from random (often touching or repeated) intervals."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ivs: list[tuple[float, float]] = []
        for _ in range(rng.randint(0, 12)):
            lo = rng.choice([rng.random(), round(rng.random(), 1)])
            _add(ivs, lo, lo + rng.choice([0.0, 0.05, rng.random() * 0.2]))
        out.append(ivs)
    return out


def test_bisections_find_what_their_definitions_say() -> None:
    for ivs in _lists(1, 2000):
        assert all(a[1] < b[0] for a, b in zip(ivs, ivs[1:], strict=False))  # what the bisections rely on
        for t in [random.Random(len(ivs)).random(), *(p for iv in ivs for p in iv)]:
            after = [i for i, iv in enumerate(ivs) if iv[1] > t]
            assert _first_ending_after(ivs, t) == (after[0] if after else len(ivs))
            end = t + 0.1
            assert _overlapping(ivs, t, end) == [iv for iv in ivs if iv[1] > t and iv[0] < end]
            assert _covered(_overlapping(ivs, t, end), t, end) == pytest.approx(sum(max(0.0, min(b, end) - max(a, t)) for a, b in ivs), abs=1e-12)
            kept = list(ivs)
            _drop_until(kept, t)
            assert kept == [iv for iv in ivs if iv[1] > t]
