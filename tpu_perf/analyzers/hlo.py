"""Reads optimized HLO text (`compiled.as_text()`, `--xla_dump_to` files) into instructions.

A small parser for the parts the analyzers need: computations, each instruction's opcode, result
shape, operands and the attributes that link computations (`calls=`, `to_apply=`, `body=`,
`condition=`). Fused computations are the ones a `fusion` instruction calls.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from tpu_perf.store import Run

_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(\(.*\))?\s*(->\s*.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<opcode>[\w\-]+)\((?P<rest>.*)$")
_ATTR = re.compile(r"\b(kind|calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")


@dataclass(frozen=True, kw_only=True)
class Instruction:
    name: str
    opcode: str
    shape: str
    operands: tuple[str, ...]
    computation: str
    attrs: dict[str, str] = field(default_factory=dict)
    text: str = ""

    @property
    def fusion_kind(self) -> str | None:
        return self.attrs.get("kind") if self.opcode == "fusion" else None

    @property
    def called(self) -> tuple[str, ...]:
        names: list[str] = []
        for key in ("calls", "to_apply", "body", "condition", "branch_computations"):
            if key in self.attrs:
                names += [n.strip().lstrip("%") for n in self.attrs[key].split(",") if n.strip()]
        return tuple(names)


@dataclass(frozen=True, kw_only=True)
class HloModule:
    name: str
    entry: str
    computations: dict[str, list[Instruction]]

    @property
    def fused_computations(self) -> frozenset[str]:
        """Computations reached through fusions (transitively): their instructions run fused."""
        direct = {c for i in self.instructions() if i.opcode == "fusion" for c in i.called}
        seen, todo = set(), list(direct)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo += [c for i in self.computations.get(name, []) for c in i.called]
        return frozenset(seen)

    def instructions(self) -> list[Instruction]:
        return [i for body in self.computations.values() for i in body]

    def top_level(self) -> list[Instruction]:
        """Instructions that run as their own kernels: outside fused and reducer computations."""
        fused = self.fused_computations
        appliers = {c for i in self.instructions() if i.opcode != "fusion" and "to_apply" in i.attrs for c in i.called}
        return [i for name, body in self.computations.items() if name not in fused and name not in appliers for i in body]


def _split_operands(rest: str) -> tuple[str, tuple[str, ...]]:
    depth, i = 1, 0
    while i < len(rest) and depth:
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        i += 1
    inside, after = rest[: i - 1], rest[i:]
    operands = tuple(m.group(1) for m in re.finditer(r"%([\w.\-]+)", inside))
    return after, operands


def parse_hlo(text: str) -> HloModule:
    """Parse one HLO module's text. Unknown lines are skipped, so newer XLA syntax degrades gently."""
    module_name = ""
    entry = ""
    computations: dict[str, list[Instruction]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("HloModule "):
            module_name = line.split()[1].rstrip(",")
            continue
        if current is None:
            m = _COMPUTATION.match(line)
            if m:
                current = m.group("name")
                computations[current] = []
                if m.group("entry"):
                    entry = current
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        after, operands = _split_operands(m.group("rest"))
        attrs = {k: v.strip("{}").replace("%", "").strip() for k, v in _ATTR.findall(after)}
        computations[current].append(
            Instruction(name=m.group("name"), opcode=m.group("opcode"), shape=m.group("shape"), operands=operands, computation=current, attrs=attrs, text=line.strip())
        )
    return HloModule(name=module_name, entry=entry, computations=computations)


@dataclass(frozen=True, kw_only=True)
class FusionSummary:
    """What the compiler fused, for one program."""

    fusions: int
    fusions_by_kind: dict[str, int]
    top_level_instructions: int
    fused_instructions: int
    unfused_by_opcode: dict[str, int]


_BOOKKEEPING = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}
"""Opcodes that launch no work: left out of the unfused counts."""


def fusion_summary(module: HloModule) -> FusionSummary:
    top = module.top_level()
    fusions = [i for i in top if i.opcode == "fusion"]
    fused = module.fused_computations
    fused_count = sum(1 for name in fused for i in module.computations.get(name, []) if i.opcode not in _BOOKKEEPING)
    unfused = Counter(i.opcode for i in top if i.opcode not in _BOOKKEEPING and i.opcode != "fusion")
    return FusionSummary(
        fusions=len(fusions),
        fusions_by_kind=dict(Counter(i.fusion_kind or "unknown" for i in fusions).most_common()),
        top_level_instructions=sum(1 for i in top if i.opcode not in _BOOKKEEPING),
        fused_instructions=fused_count,
        unfused_by_opcode=dict(unfused.most_common()),
    )


def run_hlo(run: Run, relpath: str) -> HloModule:
    """The parsed HLO file `relpath` of `run`, parsed once per loaded Run (fusion and analysis sections share it)."""
    return run.derived(f"hlo:{relpath}", lambda r: parse_hlo(r.read_text(relpath)))
