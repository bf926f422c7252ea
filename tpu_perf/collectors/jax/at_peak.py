"""Saves, at record time, what the at-peak memory breakdown needs: XLA's own liveness of the step.

The step program is compiled with XLA's dump options (`xla_dump_to`, as text) into a scratch
folder. XLA writes the HloLiveRange of the scheduled module there (`*-live-range.txt`: the values
live at the peak, with their bytes) and the scheduled HLO with op metadata (file:line tables). Both
are copied into the run (`hlo/<stem>.live-range.txt`, `hlo/<stem>.scheduled.hlo.txt`), XLA's buffer assignment (which
values share a buffer: `hlo/<stem>.buffer-assignment.txt`), with the
step signature's pytree paths and the category of each argument and output leaf
(`hlo/<stem>.signature.json`). `tpu_perf.analyzers.at_peak` reads them; nothing here re-derives
liveness.
"""

from __future__ import annotations

import inspect
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tpu_perf import jsonio
from tpu_perf.store.layout import SIGNATURE_SUFFIX

LIVE_RANGE_SUFFIX = ".live-range.txt"
SCHEDULED_SUFFIX = ".scheduled.hlo.txt"
ASSIGNMENT_SUFFIX = ".buffer-assignment.txt"

_PARAM_WORDS = ("param", "model", "weights", "variables", "trainable")
_OPT_WORDS = ("opt_state", "optimizer", "opt")


@contextmanager
def dump_options() -> Iterator[tuple[Path, dict[str, Any]]]:
    """A scratch folder and the compiler options that make XLA dump its buffer liveness there."""
    folder = Path(tempfile.mkdtemp(prefix="tpu-perf-xla-dump-"))
    try:
        yield folder, {"xla_dump_to": str(folder), "xla_dump_hlo_as_text": True}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")


def out_of_memory(exc: BaseException) -> str | None:
    """The first line of an out-of-device-memory error (XLA's RESOURCE_EXHAUSTED), else None."""
    text = str(exc)
    if not any(m in text for m in _OOM_MARKERS):
        return None
    line = next((ln for ln in text.splitlines() if any(m in ln for m in _OOM_MARKERS)), text)
    return line.strip()[:500]


def _dumped(folder: Path) -> tuple[Path, Path] | None:
    """(live-range, scheduled HLO) of the one module compiled into `folder`, if XLA wrote them."""
    ranges = sorted(folder.glob("*after_optimizations-live-range.txt"))
    if not ranges:
        return None
    live = ranges[-1]
    hlo = live.with_name(live.name.replace("-live-range.txt", ".txt"))
    return (live, hlo) if hlo.exists() else None


def dumped_hlo(folder: Path) -> str | None:
    """The optimized HLO XLA dumped into `folder` (also when the compile then failed out of memory)."""
    found = _dumped(folder)
    return found[1].read_text() if found else None


def _arg_names(fun: Any, count: int) -> list[str]:
    """Positional parameter names as jax names the HLO parameters (`state`, `batch`); a function
    jitted before the recording (fun unknown, only its jitted object) is read through `__wrapped__`."""
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"args[{i}]" for i in range(count)]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower().replace("_", " ")))


def _category(name: str, key: str, optax_node: bool, state: bool, leaf: Any) -> str:
    """A leaf's category from what it is. Train state is what the step returns updated or what it
    donates (whatever the container: a TrainState, a dict, a tuple, nnx or Keras variables): in it,
    optax's state (or a part its path calls the optimizer's) is optimizer state, integer scalars
    are counters, the rest parameters. Outside the state, names decide (a step that only computes
    gradients of `params`); everything else feeds the batch: inputs."""
    words, low = _words(name + key), (name + key).lower()
    if optax_node or "opt_state" in low or words & {"opt", "optimizer", "optimizers"} or "optimizer" in low:
        return "optimizer_state"
    counter = not tuple(getattr(leaf, "shape", ())) and "int" in str(getattr(leaf, "dtype", ""))
    if counter and (state or words & {"step", "count", "iteration", "iterations"}):
        return "other"
    return "parameters" if state or _named_parameters(name, key) else "inputs"


def _is_optax(node: Any, tu: Any) -> bool:
    return type(node).__module__.split(".")[0] == "optax" and bool(tu.tree_leaves(node))


def _leaves(name: str, tree: Any, jax: Any, state: bool = False) -> list[dict[str, Any]]:
    """One row per leaf, array or not (jax flattens both): path (as jax names the HLO parameter),
    category, shape, dtype; non-array leaves have no shape."""
    tu = jax.tree_util
    rows = []
    for path, node in tu.tree_flatten_with_path(tree, is_leaf=lambda n: _is_optax(n, tu))[0]:
        optax_node = _is_optax(node, tu)
        inner = tu.tree_flatten_with_path(node)[0] if optax_node else [((), node)]
        for sub, leaf in inner:
            key = tu.keystr(tuple(path) + tuple(sub))
            array = hasattr(leaf, "shape") and hasattr(leaf, "dtype")
            category = _category(name, key, optax_node, state, leaf)
            unnamed = category == "parameters" and state and not _named_parameters(name, key)
            unit = name + tu.keystr(tuple(path[:1])) if isinstance(tree, (tuple, list)) and path else name
            rows.append({"path": name + key, "category": category, "shape": list(leaf.shape) if array else None, "dtype": str(leaf.dtype) if array else None, "_unit": unit if unnamed else None})
    return rows


def _named_parameters(name: str, key: str) -> bool:
    low = (name + key).lower()
    return ".params" in low or "['params']" in low or any(w in name.lower() for w in _PARAM_WORDS)


def _moments(rows: list[dict[str, Any]]) -> None:
    """Optimizer state nothing names: in train state that is not optax's, a part (an argument, or
    an element of a tuple argument such as `(params, m, v, t)`, Keras's `optimizer_variables`)
    holding k copies of the shapes of an earlier part (k >= 1: adam's two moments, momentum's one)
    is that part's optimizer state; the first such part is the parameters; a part of scalars
    alone is other."""
    units: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        unit = row.pop("_unit", None)
        if unit is not None:
            units.setdefault(unit, []).append(row)

    def shapes(part: list[dict[str, Any]]) -> Counter:
        return Counter((tuple(r["shape"]), r["dtype"]) for r in part if r["shape"])

    base: Counter | None = None
    for part in units.values():
        counts = shapes(part)
        if not counts:  # scalars alone (Keras's metric variables, a step count): no model weights
            for r in part:
                r["category"] = "other"
            continue
        if base is None:
            base = counts
            continue
        ratios = {counts[k] / base[k] for k in base} if set(counts) == set(base) else set()
        if len(ratios) == 1 and (k := ratios.pop()) >= 1 and k == int(k):
            for r in part:
                r["category"] = "optimizer_state" if r["shape"] or "int" not in str(r["dtype"]) else "other"


def _outputs(out_info: Any, args: dict[str, Any], jax: Any) -> list[dict[str, Any]]:
    """Output leaves, in order; an output shaped like an argument (the new train state) takes that
    argument's categories as state, read the same way from its paths. Tuples and lists are looked
    into (nnx.jit returns `((model state, optimizer state), loss)`)."""
    tu = jax.tree_util

    def rows_of(element: Any, prefix: str, depth: int) -> list[dict[str, Any]]:
        match = next((name for name, value in args.items() if tu.tree_leaves(value) and _same_state(value, element, tu)), None)
        if match is not None:
            return [{**row, "path": f"new {row['path']}"} for row in _leaves(match, element, jax, True)]
        if isinstance(element, (tuple, list)) and depth < MAX_OUTPUT_DEPTH:
            return [row for i, part in enumerate(element) for row in rows_of(part, f"{prefix}[{i}]", depth + 1)]
        return [{**row, "path": prefix + row["path"], "category": "other"} for row in _leaves("", element, jax)]

    rows = rows_of(out_info, "out", 0)
    return [row for row in rows if row["shape"] is not None]


MAX_OUTPUT_DEPTH = 3
"""Levels of tuples looked into for the new state among a step's outputs."""


def _returned(out_info: Any, value: Any, tu: Any, depth: int = 0) -> bool:
    """Whether the step returns `value` updated, at the top or inside tuples of its outputs."""
    if _same_state(value, out_info, tu):
        return True
    return isinstance(out_info, (tuple, list)) and depth < MAX_OUTPUT_DEPTH and any(_returned(part, value, tu, depth + 1) for part in out_info)


def _same_state(arg: Any, out: Any, tu: Any) -> bool:
    """Whether `out` is `arg` updated: the same pytree paths (nodes' static data may differ: nnx
    marks its states), each array leaf of the same shape and dtype; a Python number the script
    passed in (flax's `TrainState.create(step=0)`) may come back a 0-d array."""
    if tu.tree_structure(arg) != tu.tree_structure(out):
        a_paths, o_paths = (tu.tree_flatten_with_path(t)[0] for t in (arg, out))
        if not a_paths or [tu.keystr(p) for p, _ in a_paths] != [tu.keystr(p) for p, _ in o_paths] or type(arg) is not type(out):
            return False
    for a, o in zip(tu.tree_leaves(arg), tu.tree_leaves(out), strict=True):
        if hasattr(a, "shape") and hasattr(o, "shape"):
            if (tuple(a.shape), str(a.dtype)) != (tuple(o.shape), str(o.dtype)):
                return False
        elif hasattr(a, "shape") or (hasattr(o, "shape") and tuple(o.shape) != ()):
            return False
    return True


def _donated(lowered: Any, names: list[str], jax: Any) -> set[str]:
    """Arguments the compiled step donates (any leaf), from jax's own `args_info`: known also for a
    function jitted before the recording, whose `donate_argnums` the recorder never saw."""
    try:
        args_info, kwargs_info = lowered.args_info
    except (AttributeError, TypeError, ValueError):
        return set()
    flags = {name: info for name, info in zip(names, args_info, strict=False)} | dict(kwargs_info)
    return {name for name, info in flags.items() if any(getattr(leaf, "donated", False) for leaf in jax.tree_util.tree_leaves(info))}


def _kept(lowered: Any) -> list[int] | None:
    """Positions (in jax's flattening of the arguments) of the leaves the program kept as HLO
    parameters: jax drops unused ones, so HLO parameter n is the n-th kept leaf."""
    kept = getattr(getattr(lowered, "_lowering", None), "compile_args", {}).get("kept_var_idx")
    return sorted(int(i) for i in kept) if kept is not None else None


def signature(fun: Any, abstract: tuple[tuple[Any, ...], dict[str, Any]], lowered: Any, jax: Any) -> dict[str, Any]:
    """The step's argument leaves in jax's flattening order (`index`), the HLO parameters' leaf
    positions (`kept`) and the output leaves, each with its category."""
    args, kwargs = abstract
    tu = jax.tree_util
    names = _arg_names(fun, len(args))
    named = dict(zip(names, args, strict=True)) | {k: kwargs[k] for k in sorted(kwargs)}
    returned = {name for name, value in named.items() if tu.tree_leaves(value) and _returned(lowered.out_info, value, tu)}
    donated = _donated(lowered, names, jax)
    state = returned | donated
    rows = [{**row, "donated": name in donated} for name, value in named.items() for row in _leaves(name, value, jax, name in state)]
    _moments(rows)
    for i, row in enumerate(rows):
        row["index"] = i
    category = {row["path"]: row["category"] for row in rows}
    outputs = [{**row, "category": category.get(row["path"].removeprefix("new "), row["category"])} for row in _outputs(lowered.out_info, named, jax)]
    for row in outputs:
        row.pop("_unit", None)
    return {"inputs": [row for row in rows if row["shape"] is not None], "kept": _kept(lowered), "outputs": outputs}


def save(folder: Path, stem: str, fun: Any, abstract: tuple[tuple[Any, ...], dict[str, Any]], lowered: Any, *, writer: Any, jax: Any, warn: Callable[[str], None]) -> str | None:
    """Copy XLA's dump from `folder` into the run as `<stem>.*`; returns the live-range file or None
    (with a warning: the run keeps everything else)."""
    found = _dumped(folder)
    if found is None:
        warn(f"{stem}: XLA wrote no live-range dump, so memory.at_peak is unknown for this program")
        return None
    live, hlo = found
    try:
        rows = signature(fun, abstract, lowered, jax)
    except Exception as exc:  # an unusual signature must not lose the run
        warn(f"{stem}: the step's signature could not be read for memory.at_peak ({type(exc).__name__}: {str(exc)[:200]}); arguments are classified by name only")
        rows = {"inputs": [], "outputs": []}
    writer.write_text(stem + LIVE_RANGE_SUFFIX, live.read_text())
    writer.write_text(stem + SCHEDULED_SUFFIX, hlo.read_text())
    assignment = live.with_name(live.name.replace("-live-range.txt", "-buffer-assignment.txt"))
    if assignment.exists():  # which values share one buffer (donated state, in-place updates)
        writer.write_text(stem + ASSIGNMENT_SUFFIX, assignment.read_text())
    writer.write_text(stem + SIGNATURE_SUFFIX, jsonio.dumps(rows, indent=1) + "\n")
    return stem + LIVE_RANGE_SUFFIX
