"""The tables a trace becomes, and the rules shared by every trace format.

A trace turns into four plain tables written into the run folder:
- `ops`: one row per device and op (time, FLOPs, bytes, boundness),
- `timeline`: device op intervals classified into breakdown parts, plus host markers
  (compile, input, steps, programs), from which the step-time breakdown is recomputed,
- `device_steps`: step times as the trace marks them,
- `devices`: chip, cores and peaks per device, from the trace's own stats where present.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

OPS_COLUMNS = (
    "device", "program", "name", "category", "fusion_kind", "occurrences", "total_time_s", "self_time_s",
    "flops", "bytes_accessed", "arithmetic_intensity", "bound", "op_class",
)
TIMELINE_COLUMNS = ("lane", "kind", "name", "start_s", "end_s")
STEP_COLUMNS = ("device", "step", "step_num", "name", "start_s", "end_s", "duration_s", "source")
DEVICE_COLUMNS = ("id", "name", "kind", "chip", "cores", "peak_tflops", "peak_hbm_gbps", "source")

OP_CLASSES = ("matmul", "collective", "data_movement", "compute")
"""Breakdown classes of device work, in priority order where they overlap."""

MATMUL_OPCODES = frozenset({"dot", "convolution", "ragged-dot", "scaled-dot"})
_COLLECTIVE_BASES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "send", "recv", "collective-broadcast", "ragged-all-to-all")
COLLECTIVE_OPCODES = frozenset(f"{b}{s}" for b in _COLLECTIVE_BASES for s in ("", "-start", "-done"))
DATA_MOVEMENT_OPCODES = frozenset({
    "copy", "copy-start", "copy-done", "transpose", "dynamic-slice", "dynamic-update-slice", "infeed", "outfeed",
    "send-to-host", "recv-from-host", "host-transfer",
})
_MATMUL_TARGET = re.compile(r"gemm|matmul|cublas|cudnn\$conv|onednn\$(matmul|convolution)|__ynn|mosaic_gpu_dot", re.I)
"""custom-call targets (and fusion-config kinds) that are matmuls: cuBLAS/cuDNN/oneDNN/YNNPACK."""
_CATEGORY = re.compile(r"^(?P<base>[a-z][a-z\-]*?)(-start|-done)?( fusion)?$")


def opcode_class(opcode: str, target: str | None = None) -> str | None:
    """The class of one HLO opcode (a custom-call by its target); None for `fusion` and other
    opcodes whose class depends on what they call."""
    if opcode in MATMUL_OPCODES or (opcode == "custom-call" and target and _MATMUL_TARGET.search(target)):
        return "matmul"
    if opcode in COLLECTIVE_OPCODES:
        return "collective"
    if opcode in DATA_MOVEMENT_OPCODES:
        return "data_movement"
    if opcode in ("fusion", "while", "call", "conditional", "async-start", "async-done", "custom-call"):
        return None
    return "compute"


def xla_op_class(name: str, category: str | None = None, opcode: str | None = None) -> str:
    """Class of an XLA op without its module: the opcode (given, or the instruction name less its
    `.N`), else XLA's own category (`convolution fusion`, `data formatting`, `all-reduce`), else
    compute. Names are never searched for substrings: `convert.3` is a convert, not a conv."""
    op = opcode or re.sub(r"\.\d+$", "", name)
    known = opcode_class(op) if op in MATMUL_OPCODES | COLLECTIVE_OPCODES | DATA_MOVEMENT_OPCODES else None
    if known is not None:
        return known
    cat = (category or "").strip().lower()
    if cat == "data formatting":
        return "data_movement"
    m = _CATEGORY.match(cat)
    if m:
        base = m.group("base")
        if base in ("convolution", "dot", "matmul", "gemm"):
            return "matmul"
        if base in _COLLECTIVE_BASES or base in ("all-reduce-scatter", "async-collective"):
            return "collective"
        if base in DATA_MOVEMENT_OPCODES:
            return "data_movement"
    return "compute"


_KERNEL_PREFIX = r"^(void\s+)?((\w+|\(anonymous namespace\))::)*"
_KERNEL_COLLECTIVE = re.compile(_KERNEL_PREFIX + r"(nccl|rccl|ncclDevKernel|ncclKernel|ncclDevFunc)\w*", re.I)
_KERNEL_MATMUL = re.compile(
    _KERNEL_PREFIX + r"(cutlass\w*|\w*s?gemm\w*|\w*_xmma\w*|sm\d+_xmma\w*|Cijk_\w+|implicit_convolve\w*|\w*wgrad\w*|\w*dgrad\w*|\w*fprop\w*|"
    r"cudnn\w*|nvjet\w*|ampere_\w*|volta_\w*|turing_\w*|hopper_\w*|wgmma\w*|gemv\w*|\w*Gemm\w*|mfma\w*|"
    r"conv_depthwise\w*|mm|addmm|bmm|baddbmm|matmul|linear|_?convolution\w*|conv_?\dd\w*|conv_transpose\w*|"
    r"mkldnn_rnn_layer\w*|_?cudnn_rnn\w*|miopen_rnn\w*)(\W|$)", re.I)  # fused recurrent layers: their time is their matmuls
_KERNEL_DATA = re.compile(_KERNEL_PREFIX + r"(Memcpy|Memset|memcpy\w*|memset\w*|\w*[Cc]opy\w*|\w*[Tt]ranspose\w*|CatArrayBatchedCopy\w*)")
_MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset", "memcpy", "memset"})


def kernel_op_class(name: str, category: str | None = None) -> str:
    """Class of a CUDA/ROCm kernel from anchored name patterns (the kernel's own name, after
    `void` and namespaces) and the Kineto category of copies."""
    if _KERNEL_COLLECTIVE.match(name):
        return "collective"
    if (category or "").lower() in _MEMORY_CATEGORIES or _KERNEL_DATA.match(name):
        return "data_movement"
    if _KERNEL_MATMUL.match(name):
        return "matmul"
    return "compute"


def classify_op(name: str, category: str | None = None, *, kernel: bool = False) -> str:
    """One of OP_CLASSES for a device op: a CUDA/ROCm kernel by its name (`kernel`), else an XLA op
    by its opcode or XLA's category. Analyzers refine XLA ops from the optimized HLO where the run has it."""
    return kernel_op_class(name, category) if kernel else xla_op_class(name, category)


def classify_ops(names: pd.Series, categories: pd.Series | None = None, *, kernel: bool | pd.Series = False) -> pd.Series:
    """classify_op once per distinct (name, category, kernel) triple: kernels repeat, so this is
    cheap (plain lists and a dict: pandas' MultiIndex cost ms per call, most of a small capture's)."""
    n = len(names)
    cats = ["" if pd.isna(c) else str(c) for c in categories.tolist()] if categories is not None else [""] * n
    kern = [bool(k) for k in kernel.tolist()] if isinstance(kernel, pd.Series) else [bool(kernel)] * n
    table: dict[tuple[str, str, bool], str] = {}
    out = []
    for key in zip((str(x) for x in names.tolist()), cats, kern, strict=True):
        cls = table.get(key)
        if cls is None:
            cls = table[key] = classify_op(key[0], key[1], kernel=key[2])
        out.append(cls)
    return pd.Series(out, index=names.index, dtype="object")


@dataclass(frozen=True, kw_only=True)
class TraceTables:
    """What one import produced: the tables plus facts for the run manifest."""

    ops: pd.DataFrame
    timeline: pd.DataFrame
    device_steps: pd.DataFrame
    devices: pd.DataFrame
    format: str
    """`xspace` or `kineto`."""
    platform: str | None
    files: tuple[str, ...]
    hostnames: tuple[str, ...] = ()
    """Per file of a multi-host XSpace capture, the machine it came from (XSpace `hostnames`,
    else the file name): device `host<i>/...` is `hostnames[i]`. Empty for Kineto."""
    clock_zero_s: float | None = None
    """Epoch seconds of the trace's time zero (None: unknown); the breakdown maps the recorder's
    steps onto the trace with it, then measures and reports what is left of the offset."""


def empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, dtype=object) for c in columns})  # object columns (a Series each cost 5x)


def add_boundness(ops: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    """Arithmetic intensity (FLOPs per byte) and compute- or memory-bound against the ridge point.

    The ridge point is peak FLOP/s over peak HBM bytes/s of the op's device (roofline model);
    unknown peaks, FLOPs or bytes leave `bound` as None rather than guessing.
    """
    flops = pd.to_numeric(ops["flops"], errors="coerce").to_numpy(dtype=float)
    nbytes = pd.to_numeric(ops["bytes_accessed"], errors="coerce").to_numpy(dtype=float)
    ai = np.full(len(ops), np.nan)
    np.divide(flops, nbytes, out=ai, where=nbytes > 0)
    ridge = np.full(len(ops), np.nan)
    if not devices.empty:  # numpy, not pandas' map: this runs once per import, on tables of a few rows
        tf = pd.to_numeric(devices["peak_tflops"], errors="coerce").to_numpy(dtype=float)
        bw = pd.to_numeric(devices["peak_hbm_gbps"], errors="coerce").to_numpy(dtype=float)
        at = pd.Index(devices["id"]).get_indexer(ops["device"])
        ridge[at >= 0] = ((tf * 1e12) / (bw * 1e9))[at[at >= 0]]
    bound = np.where(np.isnan(ai) | np.isnan(ridge), None, np.where(ai >= ridge, "compute", "memory"))
    return ops.assign(arithmetic_intensity=ai, bound=pd.Series(bound, index=ops.index, dtype="object"))
