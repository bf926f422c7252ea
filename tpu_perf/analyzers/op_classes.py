"""Op classes from the compiler: each XLA op's class read from the run's optimized HLO.

An instruction's class is its opcode's (`tpu_perf.traces.tables.opcode_class`: dot, convolution and
matmul custom-calls are matmul; collectives and their -start/-done are collective; copy, transpose,
dynamic-(update-)slice and host transfers are data movement; everything else, `convert` included,
is compute). A fusion, call or loop takes the class of what it calls: matmul if a dot, convolution
or matmul custom-call runs inside it, else collective if a collective does, else data movement
when it only moves data (a copy, transpose or dynamic-(update-)slice, with nothing but reshapes,
slices, broadcasts and scalar index arithmetic beside it: a scan stacking its residuals), else
compute (arithmetic that ends in a transpose or a dynamic-update-slice is still arithmetic: XLA:CPU
fuses the GELU backward of a scanned LM with the transpose of its output). Trace importers classify without the
module (by opcode name and XLA's category); analyzers replace that with these classes wherever the
op's name is an instruction of a saved program.
"""

from __future__ import annotations

import re

import pandas as pd

from tpu_perf.analyzers.hlo import HloModule, Instruction, run_hlo
from tpu_perf.store import Run
from tpu_perf.traces.tables import opcode_class

_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_FUSION_CONFIG = re.compile(r'"fusion_config"\s*:\s*\{\s*"kind"\s*:\s*"([^"]+)"')
_RANK = {"matmul": 0, "collective": 1, "data_movement": 2, "compute": 3}
_SHAPE_ONLY = frozenset({
    "parameter", "constant", "bitcast", "reshape", "broadcast", "slice", "concatenate", "pad", "reverse",
    "tuple", "get-tuple-element", "iota",
})
"""Opcodes that only lay out data: beside a data movement op they leave a fusion data movement."""


def _own_class(inst: Instruction) -> str | None:
    target = _TARGET.search(inst.text) or _FUSION_CONFIG.search(inst.text)
    return opcode_class(inst.opcode, target.group(1) if target else None)


def _scalar(inst: Instruction) -> bool:
    """A rank-0 result (a loop index, a dynamic-slice offset): bookkeeping, not array work."""
    return inst.shape.split("{")[0].endswith("[]")


def hlo_op_classes(module: HloModule) -> dict[str, str]:
    """Class of every instruction of `module`, by name."""
    memo: dict[str, str | None] = {}

    def inside(comp: str, depth: int = 0) -> str | None:
        """The strongest of matmul/collective found in a computation (transitively), else None."""
        if comp in memo or depth > 64:
            return memo.get(comp)
        memo[comp] = None  # cycles (never in valid HLO) end here
        found = [c for i in module.computations.get(comp, []) if (c := _deep(i, depth)) in ("matmul", "collective")]
        memo[comp] = min(found, key=_RANK.__getitem__) if found else None
        return memo[comp]

    def _deep(inst: Instruction, depth: int) -> str | None:
        own = _own_class(inst)
        if own is not None:
            return own
        found = [c for name in inst.called if (c := inside(name, depth + 1))]
        return min(found, key=_RANK.__getitem__) if found else None

    def moves_only(comp: str, depth: int = 0) -> bool | None:
        """True when `comp` moves data and computes nothing on arrays; None when it does neither."""
        moved = False
        for i in module.computations.get(comp, []):
            if i.opcode in _SHAPE_ONLY or _scalar(i):
                continue
            own = _own_class(i)
            if own == "data_movement":
                moved = True
            elif own is None and i.called and depth < 64:  # a nested fusion or call
                inner = [moves_only(c, depth + 1) for c in i.called]
                if any(x is False for x in inner):
                    return False
                moved = moved or any(inner)
            else:
                return False
        return moved or None

    out: dict[str, str] = {}
    for inst in module.instructions():
        own = _own_class(inst)
        if own is not None:
            out[inst.name] = own
            continue
        deep = _deep(inst, 0)
        if deep is not None:
            out[inst.name] = deep
        elif inst.opcode == "fusion" and inst.called:
            out[inst.name] = "data_movement" if moves_only(inst.called[0]) else "compute"
        else:
            out[inst.name] = "compute"
    return out


def run_op_classes(run: Run) -> dict[str, str]:
    """Instruction name -> class over the run's saved programs (the step program's names win);
    empty when the run saved no HLO. Derived once per loaded Run."""

    def derive(r: Run) -> dict[str, str]:
        programs = r.programs
        if programs.empty or "hlo_file" not in programs:
            return {}
        order = programs.sort_values("is_step", ascending=True) if "is_step" in programs else programs
        classes: dict[str, str] = {}
        for path in order["hlo_file"]:
            if isinstance(path, str) and r.exists(path):
                try:
                    classes.update(hlo_op_classes(run_hlo(r, path)))
                except (OSError, UnicodeDecodeError, ValueError):
                    continue
        return classes

    return run.derived("op_classes", derive)


def reclassify(classes: dict[str, str], names: pd.Series, current: pd.Series) -> pd.Series:
    """`current` classes with the compiler's class wherever the op's name is a known instruction."""
    if not classes:
        return current
    found = names.astype(str).map(classes)
    return found.where(found.notna(), current).astype(object)
