"""How many matmuls of one kind run one after another in a program: the layer count of an unrolled stack.

Counting a kind's occurrences reads any set of same-shape matmuls as layers: an LSTM cell's eight
gate matmuls (four on the input, four on the state, all of one shape when the input and hidden
sizes match) occurred 16 times in a 2-layer flax LSTM step and read as 16 unrolled layers. Layers
of a stack feed each other, gates do not: the longest data path through matmuls of one kind is the
number of copies of a layer, and a group of side-by-side matmuls counts once.
"""

from __future__ import annotations

from collections.abc import Hashable

from tpu_perf.analyzers.hlo import HloModule


def longest_chains(module: HloModule, kind_of: dict[str, Hashable]) -> dict[Hashable, int]:
    """For each kind of `kind_of` (dot instruction name -> its kind) that occurs more than once, the
    most instructions holding one of its dots on one data path through a computation. A fusion,
    while loop or call holding such a dot counts as one: a loop body is one copy, however many
    trips it makes, and a Python loop over scanned layers still chains its while loops."""
    seen: dict[Hashable, int] = {}
    for kind in kind_of.values():
        seen[kind] = seen.get(kind, 0) + 1
    repeated = {k for k, n in seen.items() if n > 1}
    holds = _kinds_held(module, kind_of)
    chains = {k: 1 for k in repeated}
    for body in module.computations.values():
        carried = [(i, holds.get(i.name, frozenset()).union(*(holds[f"computation:{c}"] for c in i.called if f"computation:{c}" in holds))) for i in body]
        present: dict[Hashable, int] = {}
        for _, held in carried:
            for kind in held:
                present[kind] = present.get(kind, 0) + 1
        for kind in (k for k, n in present.items() if n > 1 and k in repeated):
            depth: dict[str, int] = {}
            for instr, held in carried:
                depth[instr.name] = max((depth.get(o, 0) for o in instr.operands), default=0) + (kind in held)
            chains[kind] = max(chains[kind], max(depth.values()))
    return chains


def _kinds_held(module: HloModule, kind_of: dict[str, Hashable]) -> dict[str, frozenset]:
    """Kinds each dot holds (keyed by its name) and each computation holds, through what it calls
    (keyed "computation:<name>")."""
    out: dict[str, frozenset] = {name: frozenset({kind}) for name, kind in kind_of.items()}

    def held(comp: str, stack: frozenset[str]) -> frozenset:
        key = f"computation:{comp}"
        if key not in out:
            kinds: set = set()
            for i in module.computations.get(comp, []):
                kinds |= out.get(i.name, frozenset())
                for c in i.called:
                    if c not in stack:
                        kinds |= held(c, stack | {c})
            out[key] = frozenset(kinds)
        return out[key]

    for comp in module.computations:
        held(comp, frozenset({comp}))
    return out
