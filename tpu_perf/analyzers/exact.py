"""The exact tier of `tpu-perf check`: numbers a run's program fixes, compared without statistics.

FLOPs per step (XLA's cost analysis, or PyTorch's FLOP counter) and a hash of the step's optimized
HLO are the same in every run of the same program, whatever the machine's noise: a difference says
the pull request changed what runs, never that the machine was busy. Both are compared for every
run (not only `--topology` runs): a change is CHANGED, shown with the old and new values (exit 0
on its own: a change of work may be wanted; the timing verdict says whether it costs). XLA's peak
memory and compiles after warm-up, the other deterministic numbers, are `regression`'s
`peak_memory` (REGRESSION beyond 1 %) and `compiles` checks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from tpu_perf.store import Run

EXACT_METRICS: tuple[str, ...] = ("flops_per_step", "hlo")
"""Metric names `--metric` accepts for the exact tier."""

_METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")
"""Source locations and op names in the HLO text: they move when a line of Python moves."""


def hlo_hash(text: str) -> str:
    """The first 16 hex digits of SHA-256 over the optimized HLO without its metadata."""
    return hashlib.sha256(_METADATA.sub("", text).encode()).hexdigest()[:16]


def step_hlo_hash(run: Run) -> str | None:
    """Hash of the step program's optimized HLO (the first step row's `hlo_file`); None without one."""
    programs = run.programs
    if programs.empty or "is_step" not in programs or "hlo_file" not in programs:
        return None
    rows = programs[programs["is_step"].astype(bool) & programs["hlo_file"].notna()]
    if rows.empty:
        return None
    try:
        return hlo_hash(run.read_text(str(rows["hlo_file"].iloc[0])))
    except (OSError, UnicodeDecodeError):
        return None


def exact_checks(baseline: Sequence[Any], candidate: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """One check per exact metric in `names` that every run knows: PASS when both sides have the same
    single value, CHANGED (old -> new) otherwise; a side whose runs disagree among themselves is named."""
    from tpu_perf.analyzers.regression import Check, Verdict

    checks = []
    for name in names:
        attr, label = ("flops_per_step", "FLOPs per step") if name == "flops_per_step" else ("hlo_hash", "step HLO hash")
        base = tuple(getattr(r, attr, None) for r in baseline)
        cand = tuple(getattr(r, attr, None) for r in candidate)
        if not base or not cand or None in base or None in cand:
            continue
        old, new = sorted(set(base), key=str), sorted(set(cand), key=str)
        show = _flops if name == "flops_per_step" else str
        text = f"{label}: {'/'.join(map(show, old))} -> {'/'.join(map(show, new))}"
        numbers: dict[str, Any] = {}
        if name == "flops_per_step":
            numbers = {"unit": "FLOPs", "baseline": base, "candidate": cand, "baseline_value": old[0], "candidate_value": new[0], "ratio": new[0] / old[0] if old[0] else None}
        if old == new and len(old) == 1:
            checks.append(Check(name=name, verdict=Verdict.PASS, message=f"{text} (same program)", **numbers))
        else:
            within = " (differs between runs of one side)" if len(old) > 1 or len(new) > 1 else ""
            checks.append(Check(name=name, verdict=Verdict.CHANGED, message=f"{text}: the step's program changed{within}; this is the code's doing, not the machine's", **numbers))
    return checks


def _flops(value: float) -> str:
    return f"{value / 1e6:,.1f} MFLOP" if value < 1e9 else f"{value / 1e9:,.2f} GFLOP"
