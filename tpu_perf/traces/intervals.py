"""Interval arithmetic on numpy arrays: self time of nested events, and union coverage."""

from __future__ import annotations

import numpy as np


def self_times(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Duration minus the time covered by direct children, for properly nested events on one line.

    Events are visited in start order (longer first on ties) with a stack of open parents: one pass,
    O(n). An event that overlaps another without nesting in it (an async op) is no one's child.
    """
    n = len(start)
    order = np.lexsort((-(end - start), start))
    so, eo = start[order], end[order]
    if n < 2 or (so[1:] >= np.maximum.accumulate(eo)[:-1]).all():  # nothing nests (an XLA Ops line): no walk
        return np.maximum(end - start, 0.0)
    s, e = so.tolist(), eo.tolist()
    child = [0.0] * n
    stack: list[int] = []  # open parents, innermost last
    ends: list[float] = []  # their end times (same order), to test without indexing e
    for i, (si, ei) in enumerate(zip(s, e, strict=True)):
        while ends and ends[-1] <= si:
            ends.pop()
            stack.pop()
        if ends:
            if ei <= ends[-1]:
                child[stack[-1]] += ei - si
                stack.append(i)
                ends.append(ei)
        else:
            stack.append(i)
            ends.append(ei)
    out = np.empty(n)
    out[order] = (np.asarray(e) - np.asarray(s)) - np.asarray(child)
    return np.maximum(out, 0.0)


def coverage(boundaries: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each elementary segment [b[k], b[k+1]), how many intervals cover it (sweep line:
    +1 at each start, -1 at each end, cumulative sum)."""
    delta = np.zeros(len(boundaries) + 1)
    np.add.at(delta, np.searchsorted(boundaries, start, side="left"), 1)
    np.add.at(delta, np.searchsorted(boundaries, end, side="left"), -1)
    return np.cumsum(delta)[: len(boundaries) - 1]
