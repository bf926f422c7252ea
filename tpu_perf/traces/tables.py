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

_COLLECTIVE = re.compile(r"all-reduce|all-gather|reduce-scatter|all-to-all|collective|send|recv|nccl|rccl|allreduce|allgather|reducescatter|alltoall", re.I)
_MATMUL = re.compile(r"convolution|dgrad|wgrad|fprop|implicit_gemm|scudnn|Cijk_|\bdot\b|^dot|gemm|matmul|\bmm\b|addmm|bmm|conv|cutlass|sm\d+_xmma|wgmma|ampere_.*(gemm|sgemm|h\d+)|cublas|dot fusion|ynn_fusion", re.I)
_DATA_MOVE = re.compile(r"^copy|copy-start|copy-done|transpose|infeed|outfeed|memcpy|memset|dynamic-update-slice|host-?to-?device|device-?to-?host|\bcopy\b", re.I)


def classify_op(name: str, category: str | None = None) -> str:
    """One of OP_CLASSES for a device op, from its category (XLA) or kernel name (CUDA/ROCm)."""
    text = f"{category or ''} {name}"
    if _COLLECTIVE.search(text):
        return "collective"
    if _MATMUL.search(text):
        return "matmul"
    if _DATA_MOVE.search(category or "") or _DATA_MOVE.search(name):
        return "data_movement"
    return "compute"


def classify_ops(names: pd.Series, categories: pd.Series | None = None) -> pd.Series:
    """classify_op over unique (name, category) pairs: kernels repeat, so this is cheap."""
    cats = categories if categories is not None else pd.Series([None] * len(names), index=names.index)
    keys = pd.MultiIndex.from_arrays([names.astype(str), cats.fillna("").astype(str)])
    uniq = keys.unique()
    table = {k: classify_op(k[0], k[1]) for k in uniq}
    return pd.Series([table[k] for k in keys], index=names.index, dtype="object")


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


def empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def add_boundness(ops: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    """Arithmetic intensity (FLOPs per byte) and compute- or memory-bound against the ridge point.

    The ridge point is peak FLOP/s over peak HBM bytes/s of the op's device (roofline model);
    unknown peaks, FLOPs or bytes leave `bound` as None rather than guessing.
    """
    ops = ops.copy()
    flops = pd.to_numeric(ops["flops"], errors="coerce")
    nbytes = pd.to_numeric(ops["bytes_accessed"], errors="coerce")
    ops["arithmetic_intensity"] = (flops / nbytes.where(nbytes > 0)).astype(float)
    ridge = pd.Series(np.nan, index=ops.index)
    if not devices.empty:
        peaks = devices.set_index("id")
        tf = pd.to_numeric(peaks["peak_tflops"], errors="coerce")
        bw = pd.to_numeric(peaks["peak_hbm_gbps"], errors="coerce")
        ridge_by_dev = (tf * 1e12) / (bw * 1e9)
        ridge = ops["device"].map(ridge_by_dev).astype(float)
    ai = ops["arithmetic_intensity"]
    bound = np.where(ai.isna() | ridge.isna(), None, np.where(ai >= ridge, "compute", "memory"))
    ops["bound"] = pd.Series(bound, index=ops.index, dtype="object")
    return ops
