"""tpu_perf/'s import graph: no import circle, and no import back up a layer.

The graph is read from the source with `ast` (nothing is imported): every `import x` and
`from x import y`, relative ones resolved, at module level and inside functions alike (a function
that imports an upper layer is as much a dependency as a module that does, only later).

Imports under `if TYPE_CHECKING:` are counted too, on purpose: in `tpu_perf/__init__.py` and
`tpu_perf/store/__init__.py` they are the static mirror of the lazy (PEP 562) name tables, the
only place the graph sees those edges, and elsewhere a type named from an upper layer couples the
two layers as much as a call does.

Not seen: imports by computed name (`importlib.import_module(f"tpu_perf.commands.{name}")` in
cli.py, the lazy tables themselves, `collectors/record.py`'s framework installers), which all point
down or sideways today. Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`; those
implicit parent edges are not counted (every module would depend on the package root).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tpu_perf"

# The layers, low to high: a module may import its own layer and the layers below it, never one
# above. ARCHITECTURE.md's one-way flow (collectors -> store -> analyzers -> views), with what the
# code adds around it: the base modules import nothing of tpu_perf; hardware, modelflops and the
# trace readers sit on the store (they read and write run folders) and under the collectors (which
# use all three); advise reads the analyzers' report and views render both; the commands (and
# `doctor`) drive everything below; the dashboard uses the commands' run selectors; the CLI
# registers the commands; the notebook sits above the CLI because `%tpu_perf` parses its options
# with the CLI's own commands; the package root and `__main__` are the entry points.
# A module belongs to the layer of the longest prefix that names it (a package holds its modules).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tpu_perf.errors", "tpu_perf.jsonio", "tpu_perf.marks", "tpu_perf.pairing", "tpu_perf.version", "tpu_perf.git_state", "tpu_perf.text", "tpu_perf.units"),
    ("tpu_perf.store",),
    ("tpu_perf.hardware", "tpu_perf.modelflops", "tpu_perf.traces"),
    ("tpu_perf.collectors",),
    ("tpu_perf.analyzers",),
    ("tpu_perf.advise",),
    ("tpu_perf.views",),
    ("tpu_perf.commands", "tpu_perf.doctor"),
    ("tpu_perf.dashboard",),
    ("tpu_perf.cli",),
    ("tpu_perf.notebook",),
    ("tpu_perf", "tpu_perf.__main__"),
)

# "Collectors only observe and write ... nothing downstream imports them" (ARCHITECTURE.md): only
# what starts a recording or checks the machine for one may import tpu_perf.collectors.
MAY_IMPORT_COLLECTORS: tuple[str, ...] = ("tpu_perf.collectors", "tpu_perf.commands", "tpu_perf.doctor", "tpu_perf.cli", "tpu_perf.notebook", "tpu_perf", "tpu_perf.__main__")

# Edges known to break the rules, each to be removed by the change named beside it; an edge listed
# here that no longer exists fails the test too, so the list only shrinks.
KNOWN_EXCEPTIONS: tuple[tuple[str, str], ...] = ()
"""Edges the test lets through, each with the condition that removes it; none now (the gate's
circle was broken by putting its verdict types and decision rules below it: `analyzers/verdicts.py`,
`analyzers/decide.py`)."""


@functools.cache
def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its `__init__.py`)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` lands in: itself, else the package holding the name (`from pkg import f`)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def _targets(node: ast.Import | ast.ImportFrom, module: str, modules: dict[str, Path]) -> list[str]:
    """The tpu_perf modules one import statement of `module` loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    hits = (_nearest(n, modules) for n in names if n == PACKAGE or n.startswith(PACKAGE + "."))
    return [t for t in hits if t is not None and t != module]


@functools.cache
def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the `file:line`s of the imports that make the edge (read once a session; not to be changed)."""
    modules = module_files()
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in dict.fromkeys(_targets(node, module, modules)):
                    edges[(module, target)].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int | None:
    """The index in LAYERS of the longest prefix naming `module`; None if no layer names it."""
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            named = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if named and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return best[1] if best else None


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or (p != PACKAGE and module.startswith(p + ".")) for p in prefixes)


def _lines(edges: dict[tuple[str, str], list[str]], pairs: list[tuple[str, str]]) -> str:
    return "\n".join(f"  {a} -> {b} ({', '.join(edges[(a, b)])})" for a, b in sorted(pairs))


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in module_files() if layer(m) is None)
    assert not unplaced, f"modules in no layer of tests/test_import_graph.py's LAYERS (add each where it belongs): {unplaced}"


def test_no_import_circle() -> None:
    edges = {e: where for e, where in import_edges().items() if e not in KNOWN_EXCEPTIONS}
    found = cycles(edges)
    message = []
    for component in found:
        inside = [(a, b) for (a, b) in edges if a in component and b in component]
        upward = [(a, b) for (a, b) in inside if (layer(b) or 0) > (layer(a) or 0)]
        shown = upward or inside  # a circle across layers: the edges that go up close it
        message.append(f"import circle among {len(component)} modules ({', '.join(component[:8])}{', ...' if len(component) > 8 else ''}); {'its imports back up a layer' if upward else 'its imports'}:\n{_lines(edges, shown)}")
    assert not found, "\n".join(message)


def test_no_import_back_up_a_layer() -> None:
    edges = import_edges()
    placed = {m: layer(m) for m in module_files()}
    upward = [(a, b) for (a, b) in edges if (a, b) not in KNOWN_EXCEPTIONS and (placed[b] or 0) > (placed[a] or len(LAYERS))]  # an unplaced module fails test_every_module_has_a_layer
    downstream = [(a, b) for (a, b) in edges if (a, b) not in KNOWN_EXCEPTIONS and _under(b, ("tpu_perf.collectors",)) and not _under(a, MAY_IMPORT_COLLECTORS)]
    message = []
    if upward:
        message.append(f"imports back up a layer (tests/test_import_graph.py's LAYERS, low to high):\n{_lines(edges, upward)}")
    if downstream:
        message.append(f"imports of the collectors from downstream (only {', '.join(MAY_IMPORT_COLLECTORS)} may):\n{_lines(edges, downstream)}")
    assert not message, "\n".join(message)


def test_known_exceptions_still_exist() -> None:
    """An exception whose edge is gone is removed from KNOWN_EXCEPTIONS, so the list only shrinks."""
    gone = [e for e in KNOWN_EXCEPTIONS if e not in import_edges()]
    assert not gone, f"KNOWN_EXCEPTIONS lists edges that no longer exist; remove them: {gone}"


def test_the_graph_sees_function_level_and_type_checking_imports() -> None:
    """The reader finds the kinds of import the rules depend on, in modules known to hold them."""
    edges = import_edges()
    assert ("tpu_perf.cli", "tpu_perf.commands.script_args") in edges  # inside a method
    assert ("tpu_perf.store", "tpu_perf.store.reader") in edges  # under `if TYPE_CHECKING:`
    assert ("tpu_perf.__main__", "tpu_perf.cli") in edges


def test_relative_imports_resolve_as_python_does() -> None:
    """tpu_perf has no relative import today; one added later lands on the module Python loads."""
    modules = module_files()
    code = "from . import steps\nfrom ..store import reader, load_run\nfrom .. import jsonio\nfrom ..views.format import seconds\n"
    in_module = [_targets(n, "tpu_perf.analyzers.report", modules) for n in ast.parse(code).body]
    in_package = _targets(ast.parse("from .reader import Run").body[0], "tpu_perf.store", modules)
    assert in_module == [["tpu_perf.analyzers.steps"], ["tpu_perf.store.reader", "tpu_perf.store"], ["tpu_perf.jsonio"], ["tpu_perf.views.format"]]
    assert in_package == ["tpu_perf.store.reader"]
