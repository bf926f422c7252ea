"""The exact tier of `tpu-perf check`: numbers a run's program fixes, compared without statistics.

FLOPs per step (XLA's cost analysis, or PyTorch's FLOP counter), the bytes the step program
accesses (XLA's cost analysis) and a hash of the step's optimized HLO (`hlo_hash`: the computation,
not the folder or the lines it came from) are the same in every run of the same program, whatever
the machine's noise: a difference says the pull request changed what runs, never that the machine
was busy. They are compared for every run (not only `--topology` runs): a change is CHANGED, shown
with the old and new values (exit 0 on its own: a change of work may be wanted; the timing verdict
says whether it costs). XLA's peak memory and compiles after warm-up, the other deterministic
numbers, are `regression`'s `peak_memory` (REGRESSION beyond 1 %) and `compiles` checks; with all
of them unchanged, `tier.program_tier` lets an unjudgeable timing exit 0 as UNCHANGED.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from tpu_perf.analyzers.programs import step_program
from tpu_perf.store import Run

EXACT_METRICS: tuple[str, ...] = ("flops_per_step", "bytes_accessed", "hlo")
"""Metric names `--metric` accepts for the exact tier."""

SOURCE_TABLES: frozenset[str] = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
"""The stack-frame tables jax writes at the top of an HLO module: absolute paths of the script, of
its checkout, of tpu-perf itself, with line numbers. Two clones in different folders differ here."""

_NAME = re.compile(r"%[A-Za-z0-9_.\-]+")
"""Instruction and computation names: they follow Python names (an argument `w` is `%w.1`)."""
_HEADER_ARG = re.compile(r"([(]|, )[A-Za-z_][A-Za-z0-9_.\-]*: ")
"""A parameter's name in a computation's header line, `(w.1: f32[4,4], ...)`."""
_MODULE = re.compile(r"^HloModule [^,\s]+")
"""The module's name (`jit_<python function name>`)."""


def program_text(text: str) -> str:
    """The optimized HLO as the computation it is: without the source tables, `metadata={...}`
    (op names, source files and lines, stack-frame ids), the module's name, and with instruction,
    computation and parameter names renumbered in order of appearance. What is left is the same
    for the same program whatever folder, script line or Python names produced it."""
    lines, table = [], False
    for line in text.splitlines():
        if line.strip() in SOURCE_TABLES:
            table = True
            continue
        if table:
            if line.strip():
                continue
            table = False
        line = _strip_metadata(line)
        if line.startswith(("%", "ENTRY ")) and line.rstrip().endswith("{"):
            line = _HEADER_ARG.sub(r"\1", line)
        lines.append(_MODULE.sub("HloModule m", line))
    names: dict[str, str] = {}
    body = _NAME.sub(lambda m: names.setdefault(m.group(0), f"%{len(names)}"), "\n".join(lines))
    return re.sub(r"\n\s*\n+", "\n\n", body).strip() + "\n"


def _strip_metadata(line: str) -> str:
    """`line` without its `, metadata={...}` (braces and quoted strings inside it respected)."""
    start = line.find("metadata={")
    while start >= 0:
        i, depth, quoted = start + len("metadata={"), 1, False
        while i < len(line) and depth:
            ch = line[i]
            if quoted:
                if ch == "\\":
                    i += 1
                elif ch == '"':
                    quoted = False
            elif ch == '"':
                quoted = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        cut = start
        while cut > 0 and line[cut - 1] in " ,":
            cut -= 1
        line = line[:cut] + line[i:]
        start = line.find("metadata={", cut)
    return line


def hlo_hash(text: str) -> str:
    """The program's identity: the first 16 hex digits of SHA-256 over `program_text(text)`. The
    one hash of "the same computation" (`check`'s exact tier; the dashboard's compare page)."""
    return hashlib.sha256(program_text(text).encode()).hexdigest()[:16]


def _step_row(run: Run) -> Any:
    """The step program's row of `programs` (`programs.step_program`, the one selector); None without one."""
    return step_program(run.programs)


def step_hlo_hash(run: Run) -> str | None:
    """Hash of the step program's optimized HLO (`hlo_hash`); None without one."""
    row = _step_row(run)
    if row is None or not isinstance(row.get("hlo_file"), str):
        return None
    try:
        return hlo_hash(run.read_text(str(row["hlo_file"])))
    except (OSError, UnicodeDecodeError):
        return None


def step_bytes_accessed(run: Run) -> float | None:
    """Bytes the step program reads and writes per call (XLA's cost analysis); None when unknown."""
    row = _step_row(run)
    value = None if row is None else row.get("bytes_accessed")
    return float(value) if value is not None and value == value else None


LABELS: dict[str, tuple[str, str]] = {
    "flops_per_step": ("flops_per_step", "FLOPs per step"),
    "bytes_accessed": ("bytes_accessed", "bytes accessed by the step program"),
    "hlo": ("hlo_hash", "step HLO hash"),
}
"""Exact metric -> (RunValues attribute, label)."""


def exact_checks(baseline: Sequence[Any], candidate: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """One check per exact metric in `names` that every run knows: PASS when both sides have the same
    single value, CHANGED (old -> new) otherwise; a side whose runs disagree among themselves is named."""
    from tpu_perf.analyzers.verdicts import Check, Verdict

    checks = []
    for name in names:
        attr, label = LABELS[name]
        base = tuple(getattr(r, attr, None) for r in baseline)
        cand = tuple(getattr(r, attr, None) for r in candidate)
        if not base or not cand or None in base or None in cand:
            continue
        old, new = sorted(set(base), key=str), sorted(set(cand), key=str)
        show = {"flops_per_step": _flops, "bytes_accessed": _bytes}.get(name, str)
        text = f"{label}: {'/'.join(map(show, old))} -> {'/'.join(map(show, new))}"
        numbers: dict[str, Any] = {}
        if name != "hlo":
            ratio = new[0] / old[0] if old[0] else None
            numbers = {"unit": "FLOPs" if name == "flops_per_step" else "bytes", "baseline": base, "candidate": cand, "baseline_value": old[0], "candidate_value": new[0], "ratio": ratio}
            text += f" ({(ratio - 1) * 100:+.2f} %)" if ratio is not None and old != new else ""
        if old == new and len(old) == 1:
            checks.append(Check(name=name, verdict=Verdict.PASS, message=f"{text} (same program)", **numbers))
        else:
            within = " (differs between runs of one side)" if len(old) > 1 or len(new) > 1 else ""
            checks.append(Check(name=name, verdict=Verdict.CHANGED, message=f"{text}: the step's program changed{within}; this is the PR's code's doing (or its environment's), not the machine's", **numbers))
    return checks


def _bytes(value: float) -> str:
    return f"{value / 2**20:,.2f} MiB"


def _flops(value: float) -> str:
    return f"{value / 1e6:,.1f} MFLOP" if value < 1e9 else f"{value / 1e9:,.2f} GFLOP"
