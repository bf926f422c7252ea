"""XSpace (`*.xplane.pb`) captures from TPU, GPU or CPU into the trace tables.

Events are read with `jax.profiler.ProfileData` (no hand-written protobuf parsing); per-op FLOPs,
bytes and HLO categories come from XProf's own op_profile, run on a scratch copy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.errors import DataError
from tpu_perf.hardware import lookup_chip
from tpu_perf.traces import xprof_tools
from tpu_perf.traces.intervals import self_times
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

_DEVICE_PLANE = re.compile(r"^/device:(?P<kind>TPU|GPU|CPU)[^:]*:(?P<idx>\d+)$")
_PROGRAM_ID = re.compile(r"\((\d+)\)\s*$")
_FUSION_KIND = re.compile(r"\bkind=(k\w+)")
_COMPILE = re.compile(r"backend_compile|compile_and_load|XlaCompile|Compile\b|PjitFunction.*compile", re.I)
_INPUT = re.compile(r"Iterator::|input_pipeline|data_load|dataloader|next_batch|tpu_perf.input", re.I)


def load_profile(path: Path) -> Any:
    """ProfileData for one file; damaged or empty files raise a one-line DataError naming it."""
    from jax.profiler import ProfileData

    data = Path(path).read_bytes()
    if not data:
        raise DataError(f"{path}: empty file; re-capture the trace (it holds no XSpace)")
    try:
        profile = ProfileData.from_serialized_xspace(data)
        planes = list(profile.planes)
    except Exception as exc:
        raise DataError(f"{path}: not a readable XSpace ({type(exc).__name__}: {exc}); the file is truncated or damaged") from None
    if not planes:
        raise DataError(f"{path}: the XSpace holds no planes; re-capture the trace")
    return profile


def _op_name(event_name: str) -> str:
    head = event_name.split(" = ", 1)[0] if " = " in event_name else event_name
    return head.strip().lstrip("%")


def _events(line: Any, *, device_time: bool = False) -> pd.DataFrame:
    """Name, start and duration columns in one pass; `device_time` prefers the device_duration_ps stat."""
    names, starts, durs = [], [], []
    for e in line.events:
        names.append(e.name)
        starts.append(e.start_ns)
        dur = e.duration_ns
        if device_time:
            for key, value in e.stats:
                if key == "device_duration_ps":
                    dur = float(value) / 1e3
        durs.append(dur)
    if not names:
        return pd.DataFrame(columns=["event", "start_ns", "dur_ns"])
    return pd.DataFrame({"event": names, "start_ns": starts, "dur_ns": durs})


def _per_name(events: pd.Series, fn: Any) -> pd.Series:
    """`fn` (a Series -> Series transform) run once per distinct event name, spread back over all events."""
    codes, uniq = events.factorize()
    return fn(pd.Series(uniq)).take(codes).set_axis(events.index)


def _line_self_ns(ops: pd.DataFrame) -> np.ndarray:
    """Self time of each op, nesting taken within its own line (rows picked by index arrays, no per-group frames)."""
    start, end = ops["start_ns"].to_numpy(float), ops["end_ns"].to_numpy(float)
    out = np.zeros(len(ops))
    for rows in ops.groupby("line").indices.values():
        out[rows] = self_times(start[rows], end[rows])
    return out


def _device_tables(device: str, plane: Any, host_index: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    lines = {ln.name: ln for ln in plane.lines}
    stats = dict(plane.stats)
    modules = _events(lines["XLA Modules"]) if "XLA Modules" in lines else pd.DataFrame(columns=["event", "start_ns", "dur_ns"])
    op_lines = [lines["XLA Ops"]] if "XLA Ops" in lines else [ln for name, ln in lines.items() if name.startswith("Stream")]
    ops = pd.concat([_events(ln, device_time=True).assign(line=i) for i, ln in enumerate(op_lines)], ignore_index=True) if op_lines else pd.DataFrame()
    if not ops.empty:
        ops["name"] = _per_name(ops["event"], lambda u: u.map(_op_name))
        ops["fusion_kind"] = _per_name(ops["event"], lambda u: u.str.extract(_FUSION_KIND, expand=False))
        starts = modules["start_ns"].to_numpy(dtype=float)
        idx = np.searchsorted(starts, ops["start_ns"].to_numpy(dtype=float), side="right") - 1
        ids = modules["event"].str.extract(_PROGRAM_ID, expand=False).fillna(modules["event"]).to_numpy(dtype=object)
        ops["program"] = np.where(idx >= 0, ids[np.clip(idx, 0, None)] if len(ids) else None, None)
        ops["end_ns"] = ops["start_ns"] + ops["dur_ns"]
        ops["self_ns"] = _line_self_ns(ops)
        ops["device"] = device
    steps = _events(lines["Steps"]) if "Steps" in lines else pd.DataFrame()
    if not steps.empty:
        steps = pd.DataFrame({
            "device": device, "step": np.arange(len(steps)), "step_num": pd.to_numeric(steps["event"], errors="coerce"),
            "name": steps["event"], "start_s": steps["start_ns"] / 1e9, "end_s": (steps["start_ns"] + steps["dur_ns"]) / 1e9,
            "duration_s": steps["dur_ns"] / 1e9, "source": "device",
        })
    programs = pd.DataFrame({"lane": device, "kind": "program", "name": modules["event"], "start_s": modules["start_ns"] / 1e9, "end_s": (modules["start_ns"] + modules["dur_ns"]) / 1e9})
    kind = stats.get("device_type_string") or plane.name
    chip = lookup_chip(str(kind))
    info = {
        "id": device, "name": plane.name, "kind": str(kind), "chip": chip.name if chip else None,
        "cores": None, "peak_tflops": stats.get("peak_teraflops_per_second") or (chip.peak_tflops_per_device() if chip else None),
        "peak_hbm_gbps": stats.get("peak_hbm_bw_gigabytes_per_second") or (chip.hbm_gbps if chip else None),
        "source": "trace" if stats.get("peak_teraflops_per_second") else ("catalogue" if chip else None),
    }
    return ops, steps, programs, info


_HOST_STATS = frozenset({"step_num", "hlo_op", "device_ordinal", "program_id", "hlo_module", "run_id"})


def _host_tables(plane: Any, prefix: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Host markers (compile, input, step annotations) and XLA:CPU ops from a `/host:CPU` plane."""
    marks, steps, cpu_ops = [], [], []
    mark_of: dict[str, str | None] = {}
    for li, line in enumerate(plane.lines):
        for e in line.events:
            name = e.name
            st = None  # only the few stats a table reads: most are allocator/flow stats
            for key, value in e.stats:
                if key in _HOST_STATS:
                    st = st or {}
                    st[key] = value
            if st and "step_num" in st and not name.startswith("$"):
                steps.append((name, int(st["step_num"]), e.start_ns / 1e9, (e.start_ns + e.duration_ns) / 1e9))
            if st and "hlo_op" in st:
                cpu_ops.append((f"{prefix}CPU:{st.get('device_ordinal', 0)}", li, str(st["hlo_op"]), str(st.get("program_id", st.get("hlo_module", ""))), st.get("run_id"), e.start_ns, float(e.duration_ns)))
                continue
            if name not in mark_of:  # names repeat: each is searched once
                mark_of[name] = "compile" if _COMPILE.search(name) else "input" if _INPUT.search(name) else None
            if mark_of[name]:
                marks.append((f"{prefix}host", mark_of[name], name, e.start_ns / 1e9, (e.start_ns + e.duration_ns) / 1e9))
    host = pd.DataFrame(marks, columns=list(TIMELINE_COLUMNS))
    st_df = pd.DataFrame(steps, columns=["name", "step_num", "start_s", "end_s"]).sort_values("start_s", kind="stable")
    if not st_df.empty:
        st_df = st_df.assign(device=f"{prefix}host", step=np.arange(len(st_df)), duration_s=st_df["end_s"] - st_df["start_s"], source="annotation")
        host = pd.concat([host, pd.DataFrame({"lane": f"{prefix}host", "kind": "step", "name": st_df["name"], "start_s": st_df["start_s"], "end_s": st_df["end_s"]})], ignore_index=True)
    ops = pd.DataFrame(cpu_ops, columns=["device", "line", "name", "program", "run_id", "start_ns", "dur_ns"])
    if not ops.empty:
        ops["end_ns"] = ops["start_ns"] + ops["dur_ns"]
        ops["self_ns"] = _line_self_ns(ops)
        ops["fusion_kind"] = None
        runs = ops.groupby(["device", "run_id", "program"], dropna=False).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
        progs = pd.DataFrame({"lane": runs["device"], "kind": "program", "name": runs["program"].astype(str), "start_s": runs["start_ns"] / 1e9, "end_s": runs["end_ns"] / 1e9})
        host = pd.concat([host, progs], ignore_index=True)
    return host, st_df.reindex(columns=list(STEP_COLUMNS)), ops


def _aggregate(ops: pd.DataFrame, leaves: list[dict[str, Any]]) -> pd.DataFrame:
    """Per (device, program, op): occurrences, total and self time; FLOPs and bytes per occurrence
    from op_profile (which sums over all devices) times this device's occurrences."""
    g = ops.groupby(["device", "program", "name"], dropna=False, sort=False)  # plain reductions: named agg costs ms per call
    sums = g[["dur_ns", "self_ns"]].sum().rename(columns={"dur_ns": "total_ns"})
    agg = pd.concat([g.size().rename("occurrences"), sums, g["fusion_kind"].first()], axis=1).reset_index()
    agg["total_time_s"] = agg["total_ns"] / 1e9
    agg["self_time_s"] = agg["self_ns"] / 1e9
    prof = pd.DataFrame(leaves)
    if prof.empty:
        agg["category"] = agg["name"].str.replace(r"\.\d+$", "", regex=True)
        agg["flops"] = None
        agg["bytes_accessed"] = None
    else:
        by_op = prof.groupby(["program_id", "name"])
        prof = pd.concat([by_op["category"].first(), by_op[["occurrences", "raw_flops", "raw_bytes"]].sum()], axis=1).rename(columns={"occurrences": "occ"}).reset_index()
        agg = agg.merge(prof, how="left", left_on=["program", "name"], right_on=["program_id", "name"])
        per = agg["occ"].where(agg["occ"] > 0)
        agg["flops"] = agg["raw_flops"] / per * agg["occurrences"]
        agg["bytes_accessed"] = agg["raw_bytes"] / per * agg["occurrences"]
        agg["category"] = agg["category"].fillna(agg["name"].str.replace(r"\.\d+$", "", regex=True))
    agg["op_class"] = classify_ops(agg["name"], agg["category"])
    return agg


def read_xspace(paths: Sequence[Path]) -> TraceTables:
    """Tables from one XSpace per host (a multi-host capture is one file per host)."""
    all_ops, all_steps, timeline, devices = [], [], [], []
    for h, path in enumerate(paths):
        profile = load_profile(path)
        prefix = f"host{h}/" if len(paths) > 1 else ""
        for plane in profile.planes:
            m = _DEVICE_PLANE.match(plane.name)
            if m:
                device = f"{prefix}{m['kind']}:{m['idx']}"
                ops, steps, programs, info = _device_tables(device, plane, h)
                devices.append(info)
                all_steps.append(steps)
                timeline.append(programs)
                if not ops.empty:
                    all_ops.append(ops)
            elif plane.name == "/host:CPU":
                host, steps, cpu_ops = _host_tables(plane, prefix)
                timeline.append(host)
                all_steps.append(steps)
                if not cpu_ops.empty and not any(_DEVICE_PLANE.match(p.name) and p.name.startswith(("/device:TPU", "/device:GPU")) for p in profile.planes):
                    all_ops.append(cpu_ops)
                    devices.append({"id": cpu_ops["device"].iloc[0], "name": "/host:CPU", "kind": "cpu", "chip": None, "cores": None, "peak_tflops": None, "peak_hbm_gbps": None, "source": None})
    ops_raw = pd.concat(all_ops, ignore_index=True) if all_ops else pd.DataFrame()
    devices_df = pd.DataFrame(devices).reindex(columns=list(DEVICE_COLUMNS)) if devices else empty(DEVICE_COLUMNS)
    has_device_planes = any(str(n).startswith(("/device:TPU", "/device:GPU")) for n in devices_df["name"])
    leaves = xprof_tools.op_profile_leaves(paths) if has_device_planes else []
    if ops_raw.empty:
        ops = empty(OPS_COLUMNS)
    else:
        ops = add_boundness(_aggregate(ops_raw, leaves), devices_df).reindex(columns=list(OPS_COLUMNS))
        line = pd.DataFrame({"lane": ops_raw["device"], "kind": ops_raw["name"].map(dict(zip(ops["name"], ops["op_class"], strict=False))), "name": ops_raw["name"], "start_s": ops_raw["start_ns"] / 1e9, "end_s": ops_raw["end_ns"] / 1e9})
        timeline.append(line)
    steps = [s for s in all_steps if not s.empty]
    steps_df = pd.concat(steps, ignore_index=True).reindex(columns=list(STEP_COLUMNS)) if steps else empty(STEP_COLUMNS)
    if (steps_df["source"] == "device").any():
        steps_df = steps_df[steps_df["source"] == "device"].reset_index(drop=True)
    tl = [t for t in timeline if not t.empty]
    platform = "tpu" if devices_df["name"].astype(str).str.startswith("/device:TPU").any() else ("gpu" if devices_df["name"].astype(str).str.startswith("/device:GPU").any() else "cpu")
    return TraceTables(
        ops=ops, timeline=pd.concat(tl, ignore_index=True).reindex(columns=list(TIMELINE_COLUMNS)) if tl else empty(TIMELINE_COLUMNS),
        device_steps=steps_df, devices=devices_df, format="xspace", platform=platform, files=tuple(str(p) for p in paths),
    )
