"""Kineto (PyTorch profiler) Chrome-trace JSON into the trace tables.

The file is streamed by `kineto_scan` (windows of events decoded in one call, only the needed
fields kept). The tables are then built on factorized names and categories: regexes and op
classes run once per distinct name, not once per event, so a 100 MB trace costs about a second.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.errors import DataError
from tpu_perf.hardware.chips import by_memory, lookup_chip
from tpu_perf.traces.intervals import self_times
from tpu_perf.traces.kineto_scan import scan
from tpu_perf.traces.tables import (
    DEVICE_COLUMNS,
    OPS_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TraceTables,
    add_boundness,
    classify_ops,
    empty,
)

_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_COMPILE = re.compile(r"\(dynamo_timed\)|inductor.*compile|compile_fx|compile_inner|call_user_compiler", re.I)
"""Compiling (Dynamo's `dynamo_timed` regions, Inductor's compile); not running compiled code:
"Torch-Compiled Region: 0/0", "CompiledFunction" and "TorchDynamo Cache Lookup" are a compiled
graph's every call (its execution and guard check), not a compile."""
_INPUT = re.compile(r"DataLoader|dataloader|_next_data|enumerate\(", re.I)


class _Events:
    """The 'X' events as arrays: names and categories as codes into their distinct values."""

    def __init__(self, cols: dict[str, list[Any]]) -> None:
        self.name_code, self.names = pd.factorize(np.asarray(cols["name"], dtype=object))
        self.cat_code, self.cats = pd.factorize(np.asarray(cols["cat"], dtype=object))
        self.pid = _as_text(cols["pid"])
        self.tid = _as_text(cols["tid"])
        self.start_s = _seconds(cols["ts"])
        self.dur_s = _seconds(cols["dur"])
        self.end_s = self.start_s + np.nan_to_num(self.dur_s, nan=0.0)
        self.device = np.asarray(pd.to_numeric(pd.Series(cols["device"], dtype="object"), errors="coerce"), dtype=float)

    def __len__(self) -> int:
        return len(self.name_code)

    def name_mask(self, rx: re.Pattern[str]) -> np.ndarray:
        """Whether each event's name matches `rx`, searched once per distinct name."""
        return np.asarray([rx.search(n) is not None for n in self.names], dtype=bool)[self.name_code] if len(self.names) else np.zeros(0, bool)


def _as_text(values: list[Any]) -> np.ndarray:
    """str() of each pid/tid, computed once per distinct value (ints and strings never collide)."""
    code, uniq = pd.factorize(np.asarray(values, dtype=object))
    return np.asarray([str(u) for u in uniq], dtype=object)[code] if len(uniq) else np.asarray([], dtype=object)


def _seconds(values: Any) -> np.ndarray:
    return np.frombuffer(values, dtype=float) / 1e6 if len(values) else np.zeros(0)


def _devices(header: dict[str, Any], used: list[int]) -> pd.DataFrame:
    props = {int(p.get("id", i)): p for i, p in enumerate(header.get("deviceProperties") or []) if isinstance(p, dict)}
    rows = []
    for dev in used:
        p = props.get(dev, {})
        kind = str(p.get("name") or "GPU")
        chip = lookup_chip(kind)
        chip = by_memory(chip, p.get("totalGlobalMem")) if chip else None  # the trace's own memory picks the variant
        rows.append({"id": f"GPU:{dev}", "name": kind, "kind": kind, "chip": chip.name if chip else None, "cores": p.get("numSms"),
                     "peak_tflops": chip.peak_tflops_per_device() if chip else None, "peak_hbm_gbps": chip.hbm_gbps if chip else None,
                     "source": "catalogue" if chip else None})
    return pd.DataFrame(rows).reindex(columns=list(DEVICE_COLUMNS)) if rows else empty(DEVICE_COLUMNS)


def _ops(ev: _Events, idx: np.ndarray, lane_code: np.ndarray, lanes: list[str], self_s: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per (lane, name, category) in order of first appearance, and each event's row."""
    ncat = max(len(ev.cats), 1)
    key = (lane_code.astype(np.int64) * len(ev.names) + ev.name_code[idx]) * ncat + ev.cat_code[idx]
    group, uniq = pd.factorize(key)
    sums = pd.DataFrame({"g": group, "dur": ev.dur_s[idx], "self": self_s}).groupby("g", sort=True).agg(
        occurrences=("dur", "size"), total_time_s=("dur", "sum"), self_time_s=("self", "sum"))
    lane_of, rest = np.divmod(uniq, len(ev.names) * ncat)
    name_of, cat_of = np.divmod(rest, ncat)
    agg = pd.DataFrame({"device": np.asarray(lanes, dtype=object)[lane_of], "name": ev.names[name_of], "category": ev.cats[cat_of].astype(str),
                        "occurrences": sums["occurrences"].to_numpy(), "total_time_s": sums["total_time_s"].to_numpy(),
                        "self_time_s": sums["self_time_s"].to_numpy()})
    agg = agg.assign(program=None, fusion_kind=None, flops=None, bytes_accessed=None)
    agg["op_class"] = classify_ops(agg["name"], agg["category"], kernel=True)
    return agg, group


def _device_side(ev: _Events, header: dict[str, Any], prefix: str, is_dev: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray, pd.DataFrame]:
    """(event indices, their lane codes, lane names, self times, devices): GPU ops, else CPU-only cpu_ops."""
    idx = np.flatnonzero(is_dev)
    if len(idx):
        dev = ev.device[idx]
        pid = np.asarray(pd.to_numeric(pd.Series(ev.pid[idx], dtype="object"), errors="coerce"), dtype=float)
        dev = np.where(np.isnan(dev), pid, dev)
        dev = np.where(np.isnan(dev), 0, dev).astype(int)
        used = sorted(np.unique(dev).tolist())
        devices = _devices(header, used)
        devices["id"] = prefix + devices["id"]
        lane_code = np.searchsorted(np.asarray(used), dev)
        return idx, lane_code, [f"{prefix}GPU:{d}" for d in used], ev.dur_s[idx], devices
    cpu_cat = np.flatnonzero(ev.cats.astype(str) == "cpu_op")
    idx = np.flatnonzero(np.isin(ev.cat_code, cpu_cat))
    self_s = np.zeros(len(idx))
    if len(idx):
        pid_code, _ = pd.factorize(ev.pid[idx])
        tid_code, tids = pd.factorize(ev.tid[idx])
        group = pid_code.astype(np.int64) * max(len(tids), 1) + tid_code
        order = np.argsort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(group[order])) + 1
        for part in np.split(order, bounds):
            self_s[part] = self_times(ev.start_s[idx][part], ev.end_s[idx][part])
    devices = pd.DataFrame([{"id": prefix + "CPU:0", "name": "cpu", "kind": "cpu"}]).reindex(columns=list(DEVICE_COLUMNS))
    return idx, np.zeros(len(idx), dtype=np.int64), [prefix + "CPU:0"], self_s, devices


def _host_side(ev: _Events, host: np.ndarray, prefix: str) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """Step rows (ProfilerStep#N) and the host timeline marks (compile, input, step)."""
    step_num = np.asarray([float(m.group(1)) if (m := _STEP.match(n)) else np.nan for n in ev.names.astype(str)])
    step_num = step_num[ev.name_code] if len(ev.names) else np.zeros(0)
    not_gpu_ann = ev.cats.astype(str) != "gpu_user_annotation"
    is_step = host & ~np.isnan(step_num) & not_gpu_ann[ev.cat_code]
    sidx = np.flatnonzero(is_step)
    sidx = sidx[pd.Series(ev.start_s[sidx]).sort_values().index.to_numpy()]
    names = ev.names[ev.name_code[sidx]]
    steps = pd.DataFrame({"device": prefix + "host", "step": np.arange(len(sidx)), "step_num": step_num[sidx].astype(int),
                          "name": names, "start_s": ev.start_s[sidx], "end_s": ev.end_s[sidx],
                          "duration_s": ev.dur_s[sidx], "source": "annotation"}).reindex(columns=list(STEP_COLUMNS))
    marks = []
    for kind, rx in (("compile", _COMPILE), ("input", _INPUT)):
        m = np.flatnonzero(host & ev.name_mask(rx))
        marks.append(pd.DataFrame({"lane": prefix + "host", "kind": kind, "name": ev.names[ev.name_code[m]], "start_s": ev.start_s[m], "end_s": ev.end_s[m]}))
    marks.append(pd.DataFrame({"lane": prefix + "host", "kind": "step", "name": names, "start_s": ev.start_s[sidx], "end_s": ev.end_s[sidx]}))
    return steps, [m for m in marks if not m.empty]


def read_kineto(path: Path, rank: int | None = None, *, max_bytes: int | None = None) -> TraceTables:
    """Tables from one Kineto trace (one rank). GPU kernels are device ops; a CPU-only trace's
    `cpu_op` events are, with self time from their nesting per thread."""
    header, cols = scan(Path(path), max_bytes=max_bytes)
    ev = _Events(cols)
    del cols
    if not len(ev):
        raise DataError(f"{path}: the trace holds no complete ('X') events; was the profiler stopped before a step ran?")
    rank = rank if rank is not None else (header.get("distributedInfo") or {}).get("rank")
    prefix = f"rank{rank}/" if rank is not None else ""
    is_dev = np.isin(ev.cats.astype(str), _DEVICE_CATS)[ev.cat_code]
    idx, lane_code, lanes, self_s, devices = _device_side(ev, header, prefix, is_dev)
    if len(idx):
        ops, group = _ops(ev, idx, lane_code, lanes, self_s)
        ops = add_boundness(ops, devices).reindex(columns=list(OPS_COLUMNS))
        device_tl = pd.DataFrame({"lane": np.asarray(lanes, dtype=object)[lane_code], "kind": ops["op_class"].to_numpy()[group],
                                  "name": ev.names[ev.name_code[idx]], "start_s": ev.start_s[idx], "end_s": ev.end_s[idx]})
    else:
        ops, device_tl = empty(OPS_COLUMNS), empty(TIMELINE_COLUMNS)
    steps, marks = _host_side(ev, ~is_dev, prefix)
    timeline = pd.concat([device_tl, *marks], ignore_index=True).reindex(columns=list(TIMELINE_COLUMNS))
    platform = "gpu" if is_dev.any() else "cpu"
    base = header.get("baseTimeNanoseconds")  # PyTorch >= 2.1: epoch ns of ts 0 (ts + base is Unix time)
    zero = float(base) / 1e9 if isinstance(base, (int, float)) and base > 0 else None
    return TraceTables(ops=ops, timeline=timeline, device_steps=steps, devices=devices, format="kineto", platform=platform, files=(str(path),), clock_zero_s=zero)
