"""What fills device memory at the step program's peak: `memory.at_peak` and `aot.at_peak`.

Liveness comes from XLA itself: the HloLiveRange dump of the scheduled program (`*-live-range.txt`,
saved at record time by `tpu_perf.collectors.jax.at_peak`) lists the values live at the peak with
their bytes. Each value is classified:
- an entry parameter by its pytree path in the step's signature (`params[...]`, the optax state,
  the batch), matched by the path jax gives the HLO parameter, else by its number;
- an output of the program (the new train state) by the argument whose structure it has;
- in a generation run whose decode step is the step program, its donated arguments (carried from
  call to call beside the weights passed unchanged) and their new values are the KV cache;
- anything else by the op that defines it: forward ops (`jvp(...)`, outside `transpose(...)`) are
  activations saved for the backward pass; backward ops (`transpose(...)`) with a parameter's shape
  are gradients, other backward values and all remaining ones are temporaries.
Values in another memory space than the device's main one (TPU VMEM, `S(1)` in the layout) are not
HBM: they are left out of the peak and counted in `other_memory_space_bytes`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from tpu_perf.analyzers.buffer_assignment import (
    Allocation,
    parse_assignment,
    parse_ranges,
    space_name,
    temporaries_peak,
)
from tpu_perf.analyzers.carried import carried_paths
from tpu_perf.analyzers.hlo import HloModule, Instruction, parse_hlo
from tpu_perf.analyzers.hlo_analysis import shapes
from tpu_perf.analyzers.hlo_frames import Frames
from tpu_perf.analyzers.inference import run_requests
from tpu_perf.analyzers.programs import step_program
from tpu_perf.store import Run
from tpu_perf.store.layout import SIGNATURE_SUFFIX

CATEGORIES = ("parameters", "optimizer_state", "kv_cache", "gradients", "activations", "inputs", "temporaries", "other")
TOP_BUFFERS = 12
LIVE_RANGE_SUFFIX = ".live-range.txt"
SCHEDULED_SUFFIX = ".scheduled.hlo.txt"
ASSIGNMENT_SUFFIX = ".buffer-assignment.txt"

_PEAK_HEADER = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$")
_VALUE = re.compile(r"^\s+(?P<name>[\w.\-]+)\{(?P<index>[\d,\s]*)\}:\s*(?P<bytes>\d+) bytes")
_MEMORY_SPACE = re.compile(r":[^}]*S\((\d+)\)")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_SOURCE = re.compile(r'source_file="([^"]*)"\s+source_line=(\d+)')
_PARAMETER = re.compile(r"\bparameter\((\d+)\)")
_COPIES = ("copy", "bitcast", "copy-start", "copy-done")
_STATE = ("parameters", "optimizer_state", "kv_cache")


@dataclass(frozen=True, kw_only=True)
class PeakBuffer:
    bytes: int
    category: str
    shape: str
    """`f32[256,256]` as XLA lays it out on the device (per device under sharding)."""
    dtype: str
    op: str
    """The HLO instruction that defines the value (`fusion.3`, `params__layer0____w__.1`)."""
    op_name: str | None
    """jax's name for the op (`jit(step)/jvp()/dot_general`) or the argument's pytree path."""
    source: str | None
    """file:line of the op (from its metadata), or the argument's pytree path."""
    recomputed: bool = False
    """Made inside a jax.checkpoint (remat) region: an activation recomputed in the backward pass."""


@dataclass(frozen=True, kw_only=True)
class AtPeak:
    program: str
    peak_bytes: int
    """Bytes live at the peak of XLA's live range of the program, main memory space, per device."""
    source: str
    """Where the liveness came from: the run file with XLA's HloLiveRange dump."""
    categories: dict[str, int]
    """Bytes at the peak by category; they add up to peak_bytes."""
    fractions: dict[str, float]
    other_memory_space_bytes: int
    """Bytes XLA placed in other memory spaces than the main one (TPU VMEM, SMEM): not in peak_bytes."""
    top_buffers: tuple[PeakBuffer, ...]
    findings: tuple[str, ...]
    """The top two observations, in words."""
    memory_spaces: dict[str, int] = dataclasses.field(default_factory=dict)
    """other_memory_space_bytes by space (`vmem`, `smem`, `color 6`): XLA's allocations there."""
    space_categories: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Each other space's bytes by category at that space's own peak (TPU VMEM holds a small model's
    activations: remat shows there); they add up to memory_spaces."""
    unused_temp_bytes: int = 0
    """Part of `other`: space in XLA's temporary allocations holding no live value at the peak
    (buffers live at other times, alignment): the allocation is that large, the values are not."""
    recomputed_bytes: int = 0
    """Activations at the peak made inside remat regions (recomputed in the backward pass)."""
    basis: str = "live range"
    """`buffer assignment`: peak_bytes is every allocation XLA makes in the main memory space (the
    compiler's own total, what it checks against HBM), split at the time its temporaries peak;
    `live range`: the values XLA lists live at its peak (runs recorded before the assignment was kept)."""


def _peak_values(text: str) -> list[tuple[str, str, int]]:
    """(value name, shape index, bytes) of each value XLA lists as live at the peak."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _PEAK_HEADER.match(line)), None)
    if start is None:
        raise ValueError("no 'Live ranges at N (peak)' section in XLA's live-range dump")
    out = []
    for line in lines[start + 1 :]:
        m = _VALUE.match(line)
        if not m:
            break
        out.append((m.group("name"), m.group("index").replace(" ", ""), int(m.group("bytes"))))
    return out


def _element(shape: str, index: str) -> str:
    """The element `index` (`0`, `1,2`: first level only) of a tuple shape; the shape otherwise."""
    if not index or not shape.startswith("("):
        return shape
    depth, parts, current = 0, [], ""
    for ch in re.sub(r"/\*.*?\*/", "", shape[1:-1]):
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += ch in "({[" and 1 or 0
        depth -= ch in ")}]" and 1 or 0
        current += ch
    parts.append(current.strip())
    first = int(index.split(",")[0])
    return parts[first] if first < len(parts) else shape


def _op_name(instr: Instruction) -> str | None:
    m = _OP_NAME.search(instr.text)
    return m.group(1).replace("\\'", "'").replace('\\"', '"') if m else None


def _outputs(module: HloModule) -> dict[tuple[str, str], int]:
    """(value name, shape index) -> output position, from the entry's ROOT tuple (through bitcasts,
    copies and get-tuple-elements of multi-output fusions)."""
    entry = module.computations.get(module.entry, [])
    by_name = {i.name: i for i in entry}
    root = next((i for i in entry if i.text.startswith("ROOT")), None)
    if root is None:
        return {}
    operands = root.operands if root.opcode == "tuple" else (root.name,)
    out: dict[tuple[str, str], int] = {}
    for k, name in enumerate(operands):
        key = (name.lstrip("%"), "")
        for _ in range(8):
            out.setdefault(key, k)
            instr = by_name.get(key[0])
            if instr is None or not instr.operands or instr.opcode not in (*_COPIES, "get-tuple-element"):
                break
            index = re.search(r"\bindex=(\d+)", instr.text) if instr.opcode == "get-tuple-element" else None
            key = (instr.operands[0].lstrip("%"), index.group(1) if index else key[1])
    return out


def _recomputed(op_name: str | None) -> bool:
    """Made by a remat region's forward pass run again in the backward pass (jax names it
    `.../checkpoint/rematted_computation/...`): an activation, recomputed."""
    return bool(op_name) and "rematted_computation" in op_name


class _Classifier:
    def __init__(self, module: HloModule, signature: dict, frames: Frames) -> None:
        self.entry = {i.name: i for i in module.computations.get(module.entry, [])}
        self.nested = {i.name: i for name, comp in module.computations.items() if name != module.entry for i in comp}
        """Values defined inside a loop body or a called computation (a scan's carry and its per-layer
        work): never the program's inputs or outputs, classified by what computes them."""
        self.inputs = list(signature.get("inputs") or [])
        self.by_path = {row["path"]: row for row in self.inputs}
        self.by_index = {row["index"]: row for row in self.inputs if "index" in row}
        self.kept = signature.get("kept")
        self.outputs = list(signature.get("outputs") or [])
        self.output_of = _outputs(module)
        self.frames = frames
        self.param_shapes = {tuple(row["shape"]) for row in self.inputs if row["category"] == "parameters"}

    def _input(self, instr: Instruction, op_name: str | None) -> dict | None:
        """The signature row of an entry parameter: by its number through the leaves jax kept (it
        drops unused ones), else by the path jax gave it, else by its number alone."""
        m = _PARAMETER.search(instr.text)
        number = int(m.group(1)) if m else None
        if number is not None and self.kept is not None and number < len(self.kept) and self.kept[number] in self.by_index:
            return self.by_index[self.kept[number]]
        if op_name in self.by_path:
            return self.by_path[op_name]
        return self.inputs[number] if number is not None and number < len(self.inputs) else None

    def _source(self, instr: Instruction) -> str | None:
        m = _SOURCE.search(instr.text)
        if m:
            return f"{m.group(1)}:{m.group(2)}"
        frame = _FRAME_ID.search(instr.text)
        return self.frames.source(int(frame.group(1))) if frame else None

    def _kind(self, name: str, index: str, instr: Instruction | None, op_name: str | None, dtype: str, dims: tuple[int, ...] | None, depth: int = 0) -> tuple[str, str | None]:
        """(category, source) of the value `name` defines."""
        if instr is not None and instr.opcode == "parameter":
            row = self._input(instr, op_name)
            return (row["category"], row["path"]) if row else ("inputs", op_name)
        position = self.output_of.get((name, index))
        if position is not None and position < len(self.outputs):
            row = self.outputs[position]
            return row["category"], row["path"]
        if instr is not None and instr.opcode in _COPIES and instr.operands and depth < 8:
            inner = self.entry.get(instr.operands[0].lstrip("%"))
            if inner is not None:
                category, source = self._kind(inner.name, "", inner, _op_name(inner), dtype, dims, depth + 1)
                if category in _STATE:
                    return category, f"copy of {source}"
        if op_name and "transpose(" in op_name:
            return ("gradients" if dims in self.param_shapes else "temporaries"), None
        if op_name and "jvp(" in op_name:
            return "activations", None
        return ("temporaries" if instr is not None else "other"), None

    def buffer(self, name: str, index: str, size: int) -> tuple[PeakBuffer, bool]:
        """The buffer, and whether it is in the main memory space."""
        instr = self.entry.get(name)
        if instr is None and name in self.nested:
            return self._nested(name, index, size)
        shape = _element(instr.shape, index) if instr else "?"
        parsed = shapes(shape)
        dtype = parsed[0][0] if parsed else "?"
        space = _MEMORY_SPACE.search(shape)
        op_name = _op_name(instr) if instr else None
        category, source = self._kind(name, index, instr, op_name, dtype, parsed[0][1] if parsed else None)
        source = source or (self._source(instr) if instr else None)
        clean = re.sub(r"\{[^}]*\}", "", shape)
        recomputed = category not in _STATE and _recomputed(op_name)
        category = "activations" if recomputed else category
        buffer = PeakBuffer(bytes=size, category=category, shape=clean, dtype=dtype, op=name + (f"{{{index}}}" if index else ""), op_name=op_name, source=source, recomputed=recomputed)
        return buffer, space is None or space.group(1) == "0"


    def _nested(self, name: str, index: str, size: int) -> tuple[PeakBuffer, bool]:
        instr = self.nested[name]
        shape = _element(instr.shape, index)
        parsed = shapes(shape)
        space = _MEMORY_SPACE.search(shape)
        op_name = _op_name(instr)
        dims = parsed[0][1] if parsed else None
        if op_name and "transpose(" in op_name:
            category = "gradients" if dims in self.param_shapes else "temporaries"
        else:
            category = "activations" if op_name and "jvp(" in op_name else "temporaries"
        clean = re.sub(r"\{[^}]*\}", "", shape)
        recomputed = _recomputed(op_name)
        category = "activations" if recomputed else category
        buffer = PeakBuffer(bytes=size, category=category, shape=clean, dtype=parsed[0][0] if parsed else "?", op=name + (f"{{{index}}}" if index else ""), op_name=op_name, source=self._source(instr), recomputed=recomputed)
        return buffer, space is None or space.group(1) == "0"


def _derived(b: PeakBuffer) -> bool:
    return b.source is None or b.source.startswith(("new ", "copy of "))


def _state_key(source: str | None) -> str | None:
    """The leaf a parameter or optimizer-state buffer holds, old or new value, copy or not."""
    return source.removeprefix("copy of ").removeprefix("new ") if source else None


_REMAT = re.compile(r'op_name="[^"]*(/checkpoint/|/remat|/rematted_computation/|Checkpoint[A-Z]\w*_\d+/)')
"""jax.checkpoint in an op's name stack (`checkpoint/`, `remat2`, `rematted_computation`), or a flax
module wrapped by nn.remat (`CheckpointDense_0`, `ScanCheckpointBlock_0`)."""

SECOND_COPY = " (a second copy of the leaf, live at the peak)"
"""Appended to the source of a state leaf's second value live at the peak (counted a temporary)."""


def _second_copies(buffers: list[PeakBuffer]) -> list[PeakBuffer]:
    """A leaf live twice at the peak (its old and its new value, when the update is not done in
    place) counts once as state, the argument where it is live; the second copy (the new value, or
    a copy) is a temporary the update needs."""
    seen: set[str] = set()
    out = list(buffers)
    for i in sorted(range(len(buffers)), key=lambda i: _derived(buffers[i])):  # the arguments first
        b = buffers[i]
        key = _state_key(b.source) if b.category in _STATE else None
        if key is not None and key in seen:
            out[i] = dataclasses.replace(b, category="temporaries", source=f"{b.source}{SECOND_COPY}")
        elif key is not None:
            seen.add(key)
    return out


def human_bytes(n: float) -> str:
    """1.5 GiB, 256.0 KiB: binary units, one decimal."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


FINDING_MIN_FRACTION = 0.01
"""A category below this share of the peak gets no advice (a 4-byte step count is not "optimizer
state to shard")."""


def _findings(categories: dict[str, int], peak: int, buffers: list[PeakBuffer], *, rematerialised: bool = False, recomputed: int = 0, donated: bool = False, decode: bool = False) -> tuple[str, ...]:
    """The two largest categories holding at least FINDING_MIN_FRACTION of the peak, in words, with
    the change that shrinks each; `rematerialised`: the program already uses jax.checkpoint, so
    "rematerialise" is not the change for activations; `recomputed`: bytes of activations made
    again in the backward pass, live at the peak; `donated`: the step already donates its state, so
    donation is not the change for second copies of it; `decode`: a generation run's decode step
    (weights served, not trained: no FSDP over a data axis)."""
    advice = {
        "optimizer_state": "shard it across devices (ZeRO-style, over the data axis) or use a factored optimizer (adafactor)",
        "parameters": "shard them over the heads and hidden units (tensor parallel) or serve them in bf16 or int8" if decode else "shard them (FSDP over the data axis) or keep them in bf16",
        "kv_cache": "keep it in bf16, size it to the longest sequence served, or shard it over the heads",
        "activations": "rematerialise (jax.checkpoint with a policy such as dots_with_no_batch_dims_saveable) or use a smaller batch",
        "gradients": "accumulate over micro-batches or shard them with the parameters",
        "temporaries": "see the largest in top_buffers (fusions XLA keeps whole; a smaller batch or sequence shrinks them)",
        "inputs": "feed a smaller batch per device, or shard the batch over more devices",
        "other": "see the largest buffers",
    }
    out = []
    state, held = ("KV-cache", "cache") if decode else ("train-state", "state")
    for name, size in sorted(categories.items(), key=lambda kv: -kv[1])[:2]:
        if not peak or size < FINDING_MIN_FRACTION * peak:
            continue
        count = sum(1 for b in buffers if b.category == name)
        said = advice[name]
        copies = sum(b.bytes for b in buffers if b.category == "temporaries" and (b.source or "").endswith(SECOND_COPY))
        if name == "activations" and recomputed:
            said = (f"{human_bytes(recomputed)} of it is values of remat regions recomputed in the backward pass, live together at the peak: "
                    "remat moves bytes from saved activations to recomputed ones; it lowers the peak only when fewer are live at once "
                    "(remat larger blocks, or a policy such as jax.checkpoint_policies.nothing_saveable), else a smaller batch or sequence")
        elif name == "activations" and rematerialised:
            said = ("the step already rematerialises (jax.checkpoint / nn.remat in its op names), so these are mostly the inputs each "
                    "checkpointed block saves: a smaller batch or sequence, or a policy that saves less or offloads to the host "
                    "(jax.checkpoint_policies), shrinks them")
        elif name == "other" and sum(b.bytes for b in buffers if b.source == GAP) * 2 >= size:
            said = "mostly space in XLA's temporary allocations that holds no live value at the peak (buffers live at other times, alignment): it shrinks with the temporaries"
        elif name == "temporaries" and 2 * copies >= size and donated:
            said = (f"{human_bytes(copies)} of it is second copies of {state} leaves (their old and new values live together): "
                    f"the {held} is donated, yet XLA makes these new values before it frees the old ones (top_buffers names the leaves)")
        elif name == "temporaries" and 2 * copies >= size:  # the old and new state live together: not a batch-size matter
            said = (f"{human_bytes(copies)} of it is second copies of {state} leaves (their old and new values live together): "
                    f"donate the {held} to the step so the update is written in place" + (" (jax.jit(..., donate_argnums=...) on the cache argument)" if decode else " (see no-donation)"))
        out.append(f"{name.replace('_', ' ')} is {100 * size / peak:.0f} % of the peak ({human_bytes(size)} in {count} buffers): {said}")
    return tuple(out)


def _from_assignment(classify: _Classifier, allocations: list[Allocation], ranges: dict[tuple[str, str], tuple[int, int]], color: int = 0) -> list[PeakBuffer]:
    """Every allocation of memory space `color`, as buffers: the resident ones whole (arguments
    by their leaf, constants and scratch as other), the temporaries by the values live when they
    peak, and what is left of their allocations then (gaps between live values) as other."""
    buffers = []
    for a in allocations:
        if a.color != color or not a.resident:
            continue
        value = next((v for v in a.values if _is_parameter(classify, v.name)), None)
        if a.kind == "parameter" and value is not None:
            buffers.append(classify.buffer(value.name, value.index, a.size)[0])
        else:
            buffers.append(PeakBuffer(bytes=a.size, category="other", shape="", dtype="", op=f"allocation {a.number}", op_name=None, source=f"XLA {a.kind} allocation"))
    peak = temporaries_peak(allocations, ranges, color)
    live = [classify.buffer(v.name, v.index, size)[0] for v, size in peak.live]
    gap = peak.timed_bytes - sum(size for _, size in peak.live)
    if gap > 0:
        buffers.append(PeakBuffer(bytes=gap, category="other", shape="", dtype="", op="temporary allocations", op_name=None, source=GAP))
    return buffers + live


GAP = "space in XLA's temporary allocations not holding a live value at the peak (fragmentation, buffers live at other times)"


def _by_category(buffers: list[PeakBuffer]) -> dict[str, int]:
    categories = dict.fromkeys(CATEGORIES, 0)
    for buffer in buffers:
        categories[buffer.category] += buffer.bytes
    return categories


def _is_parameter(classify: _Classifier, name: str) -> bool:
    instr = classify.entry.get(name)
    return instr is not None and instr.opcode == "parameter"


def _from_live_range(classify: _Classifier, text: str) -> tuple[list[PeakBuffer], dict[str, int]]:
    """Runs recorded before the buffer assignment was kept: the values XLA lists live at its peak."""
    buffers, spaces = [], {}
    for name, index, size in _peak_values(text):
        buffer, main = classify.buffer(name, index, size)
        if main:
            buffers.append(buffer)
        else:
            spaces["other"] = spaces.get("other", 0) + size
    return buffers, spaces


def _kv_cache(signature: dict) -> dict:
    """The signature with the arguments a decode step carries (and their new values) as `kv_cache`:
    donated, or returned updated (`carried.carried_paths`), beside the weights it reads unchanged."""
    carried = carried_paths(signature)
    if not carried:
        return signature

    def mark(row: dict) -> dict:
        return {**row, "category": "kv_cache"} if row["path"].removeprefix("new ") in carried else row

    return {**signature, "inputs": [mark(r) for r in signature["inputs"]], "outputs": [mark(r) for r in signature.get("outputs") or ()]}


def at_peak_of(run: Run, stem: str, program: str, *, decode: bool = False) -> AtPeak | None:
    """The breakdown for the program whose XLA dump was saved as `<stem>.*`; None without one.
    `decode`: the program is a generation run's decode step (its donated arguments: the KV cache)."""
    live_file = stem + LIVE_RANGE_SUFFIX
    if not run.exists(live_file):
        return None
    live_text = run.read_text(live_file)
    text = run.read_text(stem + SCHEDULED_SUFFIX)
    signature = json.loads(run.read_text(stem + SIGNATURE_SUFFIX)) if run.exists(stem + SIGNATURE_SUFFIX) else {}
    signature = _kv_cache(signature) if decode else signature
    classify = _Classifier(parse_hlo(text), signature, Frames(text))
    allocations = parse_assignment(run.read_text(stem + ASSIGNMENT_SUFFIX)) if run.exists(stem + ASSIGNMENT_SUFFIX) else []
    space_categories: dict[str, dict[str, int]] = {}
    if allocations:
        ranges = parse_ranges(live_text)
        buffers = _from_assignment(classify, allocations, ranges)
        spaces: dict[str, int] = {}
        for color in sorted({a.color for a in allocations} - {0}):
            spaces[space_name(color)] = sum(a.size for a in allocations if a.color == color)
            space_categories[space_name(color)] = _by_category(_from_assignment(classify, allocations, ranges, color))
        source, basis = f"XLA buffer assignment and HloLiveRange ({stem + ASSIGNMENT_SUFFIX})", "buffer assignment"
    else:
        buffers, spaces = _from_live_range(classify, live_text)
        source, basis = f"XLA HloLiveRange ({live_file})", "live range"
    buffers = _second_copies(buffers)
    categories = _by_category(buffers)
    peak = sum(categories.values())
    buffers.sort(key=lambda b: -b.bytes)
    recomputed = sum(b.bytes for b in buffers if b.recomputed)
    return AtPeak(
        program=program,
        peak_bytes=peak,
        source=source,
        categories=categories,
        fractions={k: v / peak for k, v in categories.items()} if peak else {},
        other_memory_space_bytes=sum(spaces.values()),
        top_buffers=tuple(buffers[:TOP_BUFFERS]),
        findings=_findings(categories, peak, buffers, rematerialised=bool(_REMAT.search(text)), recomputed=recomputed,
                           donated=any(row.get("donated") for row in signature.get("inputs") or () if row["category"] in _STATE), decode=decode),
        memory_spaces=dict(sorted(spaces.items())),
        space_categories=space_categories,
        recomputed_bytes=recomputed,
        unused_temp_bytes=sum(b.bytes for b in buffers if b.source == GAP),
        basis=basis,
    )


def step_at_peak(run: Run) -> AtPeak | None:
    """`memory.at_peak`: the breakdown of the step program (`programs.step_program`, the one
    selector), where its dump was saved; the decode step of a generation run splits out its KV cache."""
    row = step_program(run.programs)
    hlo = None if row is None else row.get("hlo_file")
    if not isinstance(hlo, str):
        return None
    return at_peak_of(run, hlo.removesuffix(".hlo.txt"), str(row.get("function")), decode=run_requests(run)[2])
