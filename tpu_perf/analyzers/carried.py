"""What a decode step carries from call to call (its KV cache), read from the step program's
argument signature (collectors/jax/at_peak.py): the arguments it donates, or, where it donates
none, those it returns updated (a `new ...` output of the same path). The weights it reads
unchanged are neither."""

from __future__ import annotations

import numpy as np


def carried_paths(signature: dict) -> set[str]:
    """Paths of the arguments a decode step carries: donated, else returned updated."""
    inputs = signature.get("inputs") or ()
    donated = {row["path"] for row in inputs if row.get("donated")}
    if donated:
        return donated
    returned = {row["path"].removeprefix("new ") for row in signature.get("outputs") or () if str(row.get("path", "")).startswith("new ")}
    return {row["path"] for row in inputs if row["path"] in returned}


def carried_bytes(signature: dict) -> float | None:
    """Bytes of the carried arguments (None when it carries none, or a shape or dtype is unknown)."""
    paths = carried_paths(signature)
    rows = [row for row in signature.get("inputs") or () if row["path"] in paths]
    if not rows:
        return None
    try:
        return float(sum(int(np.prod(row["shape"])) * np.dtype(row["dtype"]).itemsize for row in rows))
    except (TypeError, KeyError):
        return None
