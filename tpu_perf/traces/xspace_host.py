"""One host's XSpace (`*.xplane.pb`, TPU, GPU or CPU) into its share of the trace tables.

A file is read a plane and a line at a time (tpu_perf/traces/xplane_stream.py). Per-op FLOPs,
bytes and HLO categories come from the op's own event metadata (the `flops`, `bytes_accessed` and
`hlo_category` stats XProf's op_profile reads too); only device planes without them (GPU
captures) fall back to XProf's op_profile on a scratch copy. Each host's tables are complete on
their own (devices are named `host<i>/...` when there are several), which is what lets
tpu_perf/traces/xspace_pool.py read hosts in parallel processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
    add_boundness,
    classify_ops,
    empty,
    opcode_class,
)
from tpu_perf.traces.xplane_stream import (
    DamagedXSpace,
    Line,
    Plane,
    SpaceInfo,
    breakdown_bytes,
    planes,
)

_DEVICE_PLANE = re.compile(r"^/device:(?P<kind>TPU|GPU|CPU)[^:]*:(?P<idx>\d+)$")
_GPU_DEVICE = re.compile(r"(?:^|/)GPU:")
_PROGRAM_ID = re.compile(r"\((\d+)\)\s*$")
_FUSION_KIND = re.compile(r"\bkind=(k\w+)")
_COMPILE = re.compile(r"backend_compile|compile_and_load|XlaCompile|Compile\b|PjitFunction.*compile", re.I)
_INPUT = re.compile(r"Iterator::|input_pipeline|data_load|dataloader|next_batch|tpu_perf.input", re.I)
_HOST_STATS = ("step_num", "hlo_op", "device_ordinal", "program_id", "hlo_module", "run_id")
_EAGER_MATMUL_MODULE = re.compile(r"^jit_(dot_general|conv_general_dilated|ragged_dot(_general)?|matmul|dot|vdot|vecdot|matvec|vecmat|inner|tensordot|_?einsum)$")
"""XLA:CPU modules that JAX runs for one matmul when the step is not jitted: `jit_<primitive>` for
`lax.dot_general`/`conv_general_dilated`, and the jnp functions that are only a matmul (`@` is
`jnp.matmul`). XLA:CPU names their matmul `ynn_fusion` (YNNPACK), as it does reductions, so the op
name alone cannot tell; the module can. Jitted programs are classified from their saved HLO."""
_TEXT_OPS = ("device", "name", "program", "fusion_kind", "category")
_RAW_OPS = ("device", "name", "program", "start_ns", "dur_ns", "end_ns", "self_ns", "fusion_kind", "flops", "bytes_accessed", "category")


@dataclass(frozen=True, kw_only=True)
class HostTables:
    """One host's share of the trace tables, complete on its own."""

    ops: pd.DataFrame
    timeline: pd.DataFrame
    device_steps: pd.DataFrame
    devices: pd.DataFrame
    hostname: str
    """From the XSpace's `hostnames`, else the file name before `.xplane.pb`."""
    clock_zero_s: float | None = None
    """Epoch seconds of the trace's time zero (the `Task Environment` plane's `profile_start_time`):
    the trace's times plus this are on the recorder's (epoch) clock, up to the clocks' disagreement."""


def _op_name(event_name: str) -> str:
    head = event_name.split(" = ", 1)[0] if " = " in event_name else event_name
    return head.strip().lstrip("%")


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _by_id(plane: Plane, ids: np.ndarray, fn: Any) -> np.ndarray:
    """`fn(metadata id)` once per distinct id, spread back over every event."""
    uniq, inv = np.unique(ids, return_inverse=True)
    return np.array([fn(int(i)) for i in uniq], dtype=object)[inv] if len(uniq) else np.array([], dtype=object)


def _line_self_ns(ops: pd.DataFrame) -> np.ndarray:
    """Self time of each op, nesting taken within its own line (rows picked by index arrays, no per-group frames)."""
    start, end = ops["start_ns"].to_numpy(float), ops["end_ns"].to_numpy(float)
    out = np.zeros(len(ops))
    for rows in ops.groupby("line").indices.values():
        out[rows] = self_times(start[rows], end[rows])
    return out


def _op_meta(plane: Plane, i: int) -> tuple[Any, ...]:
    """(op name, fusion kind, FLOPs, bytes, HLO category) of one op metadata id."""
    ev = plane.event_names.get(i, "")
    st = plane.event_stats(i)
    kind = _FUSION_KIND.search(ev)
    breakdown = st.get("memory_access_breakdown")  # per memory space; empty for copies XProf does not count
    nbytes = breakdown_bytes(breakdown) if isinstance(breakdown, bytes) else _num(st.get("bytes_accessed"))
    return _op_name(ev), kind.group(1) if kind else None, _num(st.get("flops")), nbytes, st.get("hlo_category")


def _op_lines(plane: Plane, lines: list[Line]) -> dict[str, np.ndarray]:
    """Device op events as columns, with their metadata's name, fusion kind, FLOPs, bytes and
    category (looked up once per id) and their self time within their line."""
    meta: dict[int, tuple[Any, ...]] = {}
    parts: list[dict[str, np.ndarray]] = []
    for line in lines:
        uniq, inv = np.unique(line.metadata_id, return_inverse=True)
        rows = [meta.get(u) or meta.setdefault(u, _op_meta(plane, u)) for u in uniq.tolist()]
        col = [np.array([m[k] for m in rows], dtype=float if k in (2, 3) else object) for k in range(5)]
        end = line.start_ns + line.dur_ns
        parts.append({
            "start_ns": line.start_ns, "dur_ns": line.dur_ns, "end_ns": end, "self_ns": self_times(line.start_ns, end),
            "name": col[0][inv], "fusion_kind": col[1][inv], "flops": col[2][inv], "bytes_accessed": col[3][inv], "category": col[4][inv],
        })
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]} if parts else {}


def _program_id(module: str) -> str:
    m = _PROGRAM_ID.search(module)
    return m.group(1) if m else module


def _device_tables(device: str, plane: Plane) -> tuple[dict[str, np.ndarray], pd.DataFrame, dict[str, np.ndarray], dict[str, Any]]:
    names = set(plane.line_names)
    op_names = {"XLA Ops"} if "XLA Ops" in names else {n for n in names if n.startswith("Stream")}
    read = list(plane.lines(only={"XLA Modules", "Steps", *op_names}, duration_stat="device_duration_ps", duration_lines=op_names))  # one decode pass
    lines = {ln.name: ln for ln in read if ln.name in ("XLA Modules", "Steps")}
    empty_line = Line("", np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    modules = lines.get("XLA Modules", empty_line)
    module_names = _by_id(plane, modules.metadata_id, lambda i: plane.event_names.get(i, ""))
    ops = _op_lines(plane, [ln for ln in read if ln.name in op_names])
    if ops:
        idx = np.searchsorted(modules.start_ns, ops["start_ns"], side="right") - 1
        ids = _by_id(plane, modules.metadata_id, lambda i: _program_id(plane.event_names.get(i, "")))
        ops["program"] = np.where(idx >= 0, ids[np.clip(idx, 0, None)] if len(ids) else None, None)
        ops["device"] = np.full(len(idx), device, dtype=object)
    steps = pd.DataFrame()
    if "Steps" in lines and len(step_line := lines["Steps"].metadata_id):
        st = lines["Steps"]
        step_names = _by_id(plane, step_line, lambda i: plane.event_names.get(i, ""))
        steps = pd.DataFrame({
            "device": device, "step": np.arange(len(step_names)), "step_num": pd.to_numeric(pd.Series(step_names, dtype=object), errors="coerce"),
            "name": pd.Series(step_names, dtype=object), "start_s": st.start_ns / 1e9, "end_s": (st.start_ns + st.dur_ns) / 1e9,
            "duration_s": st.dur_ns / 1e9, "source": "device",
        })
    n = len(module_names)
    programs = {"lane": np.full(n, device, dtype=object), "kind": np.full(n, "program", dtype=object), "name": module_names,
                "start_s": modules.start_ns / 1e9, "end_s": (modules.start_ns + modules.dur_ns) / 1e9}
    stats = plane.stats
    kind = stats.get("device_type_string") or plane.name
    chip = lookup_chip(str(kind))
    info = {
        "id": device, "name": plane.name, "kind": str(kind), "chip": chip.name if chip else None,
        "cores": None, "peak_tflops": stats.get("peak_teraflops_per_second") or (chip.peak_tflops_per_device() if chip else None),
        "peak_hbm_gbps": stats.get("peak_hbm_bw_gigabytes_per_second") or (chip.hbm_gbps if chip else None),
        "source": "trace" if stats.get("peak_teraflops_per_second") else ("catalogue" if chip else None),
    }
    return ops, steps, programs, info


def _host_tables(plane: Plane, prefix: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Host markers (compile, input, step annotations) and XLA:CPU ops from a `/host:CPU` plane.

    Marks are decided once per event name; stats are read only on lines that can hold a step
    number or an XLA op."""
    mark_of = {i: ("compile" if _COMPILE.search(n) else "input" if _INPUT.search(n) else None) for i, n in plane.event_names.items()}
    mark_ids = np.array([i for i, m in mark_of.items() if m], dtype=np.int64)
    marks, steps, cpu_ops = [], [], []
    for li, line in enumerate(plane.lines(stats=_HOST_STATS, when=("step_num", "hlo_op"), events=mark_ids.tolist())):
        hlo_op = line.stats.get("hlo_op")
        is_op = np.array([v is not None for v in hlo_op], dtype=bool) if hlo_op is not None else np.zeros(len(line.metadata_id), dtype=bool)
        if "step_num" in line.stats:
            for i, sn in enumerate(line.stats["step_num"]):
                name = plane.event_names.get(int(line.metadata_id[i]), "")
                if sn is not None and not name.startswith("$"):
                    steps.append((name, int(sn), line.start_ns[i] / 1e9, (line.start_ns[i] + line.dur_ns[i]) / 1e9))
        for i in np.flatnonzero(is_op):
            st = {k: v[i] for k, v in line.stats.items()}
            module = str(st.get("hlo_module") or "")
            category = "dot" if _EAGER_MATMUL_MODULE.match(module) and opcode_class(re.sub(r"\.\d+$", "", str(st["hlo_op"]))) != "data_movement" else None
            cpu_ops.append((f"{prefix}CPU:{st.get('device_ordinal') or 0}", li, str(st["hlo_op"]), str(st.get("program_id") or module), st.get("run_id"), line.start_ns[i], float(line.dur_ns[i]), category))
        sel = np.flatnonzero(np.isin(line.metadata_id, mark_ids) & ~is_op)
        marks.extend((f"{prefix}host", mark_of[int(line.metadata_id[i])], plane.event_names[int(line.metadata_id[i])], line.start_ns[i] / 1e9, (line.start_ns[i] + line.dur_ns[i]) / 1e9) for i in sel)
    host = pd.DataFrame(marks, columns=list(TIMELINE_COLUMNS))
    if not steps and not cpu_ops:  # an accelerator's host plane: markers only (the frames below cost ms each)
        return host, empty(STEP_COLUMNS), pd.DataFrame()
    st_df = pd.DataFrame(steps, columns=["name", "step_num", "start_s", "end_s"]).sort_values("start_s", kind="stable")
    if not st_df.empty:
        st_df = st_df.assign(device=f"{prefix}host", step=np.arange(len(st_df)), duration_s=st_df["end_s"] - st_df["start_s"], source="annotation")
        host = pd.concat([host, pd.DataFrame({"lane": f"{prefix}host", "kind": "step", "name": st_df["name"], "start_s": st_df["start_s"], "end_s": st_df["end_s"]})], ignore_index=True)
    ops = pd.DataFrame(cpu_ops, columns=["device", "line", "name", "program", "run_id", "start_ns", "dur_ns", "category"])
    if not ops.empty:
        ops["end_ns"] = ops["start_ns"] + ops["dur_ns"]
        ops["self_ns"] = _line_self_ns(ops)
        ops["fusion_kind"] = None
        ops["flops"] = np.nan
        ops["bytes_accessed"] = np.nan
        runs = ops.groupby(["device", "run_id", "program"], dropna=False).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
        progs = pd.DataFrame({"lane": runs["device"], "kind": "program", "name": runs["program"].astype(str), "start_s": runs["start_ns"] / 1e9, "end_s": runs["end_ns"] / 1e9})
        host = pd.concat([host, progs], ignore_index=True)
    return host, st_df.reindex(columns=list(STEP_COLUMNS)), ops


def _raw_ops(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every op event of the host as columns (text as objects; no frame: only their sums and the
    timeline's rows are kept, and a frame of every event cost ms to build and read back)."""
    if not parts:
        return {}
    return {c: np.concatenate([p[c] for p in parts]).astype(object if c in _TEXT_OPS else float) for c in _RAW_OPS}


def _codes(*columns: pd.Series | np.ndarray) -> np.ndarray:
    """One int64 code per distinct combination of the columns' values (None is a value of its own)."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        c, uniq = pd.factorize(col, use_na_sentinel=False)
        code = code * (len(uniq) + 1) + c
    return code


def _aggregate(ops: dict[str, np.ndarray]) -> tuple[pd.DataFrame, np.ndarray]:
    """Per (device, program, op), in order of first occurrence: occurrences, total and self time,
    FLOPs and bytes summed over occurrences (None where no occurrence has them), the first fusion
    kind and category given. Also each row's group. Reductions are bincounts over group codes:
    pandas' groupby costs ms per call, most of a small capture's time."""
    uniq, first, inv = np.unique(_codes(ops["device"], ops["program"], ops["name"]), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups by first occurrence, as groupby(sort=False)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group, n = rank[inv], len(uniq)
    rows = first[order]

    def total(col: str, min_count: bool = False) -> np.ndarray:
        v = np.asarray(ops[col], dtype=float)
        got = ~np.isnan(v)
        out = np.bincount(group[got], weights=v[got], minlength=n)
        return np.where(np.bincount(group[got], minlength=n) > 0, out, np.nan) if min_count else out

    def first_given(col: str) -> np.ndarray:
        v = np.asarray(ops[col], dtype=object)
        given = np.flatnonzero(pd.notna(v))
        out = np.full(n, None, dtype=object)
        g, at = np.unique(group[given], return_index=True)
        out[g] = v[given[at]]
        return out

    total_ns, self_ns = total("dur_ns"), total("self_ns")
    device, name = np.asarray(ops["device"], dtype=object)[rows], np.asarray(ops["name"], dtype=object)[rows]
    category = first_given("category")
    missing = pd.isna(category)
    category[missing] = [re.sub(r"\.\d+$", "", str(x)) for x in name[missing]]
    op_class = classify_ops(pd.Series(name, dtype=object), pd.Series(category, dtype=object), kernel=pd.Series([bool(_GPU_DEVICE.search(str(d))) for d in device.tolist()]))
    agg = pd.DataFrame({  # built once from numpy columns: pandas' setitem costs ms a column
        "device": pd.Series(device, dtype=object), "program": pd.Series(np.asarray(ops["program"], dtype=object)[rows], dtype=object),
        "name": pd.Series(name, dtype=object), "occurrences": np.bincount(group, minlength=n), "total_ns": total_ns, "self_ns": self_ns,
        "flops": total("flops", True), "bytes_accessed": total("bytes_accessed", True),
        "fusion_kind": pd.Series(first_given("fusion_kind"), dtype=object), "category": pd.Series(category, dtype=object),
        "total_time_s": total_ns / 1e9, "self_time_s": self_ns / 1e9, "op_class": pd.Series(op_class.to_numpy(dtype=object), dtype=object),
    })
    return agg, group


def _row_op_class(agg: pd.DataFrame, group: np.ndarray) -> np.ndarray:
    """Each op event's class: that of the first aggregated op with its (program, name) (the
    timeline's classes are not split by device)."""
    _, first, inv = np.unique(_codes(agg["program"].astype(str), agg["name"].astype(str)), return_index=True, return_inverse=True)
    return agg["op_class"].to_numpy(dtype=object)[first[inv]][group]


def _with_op_profile(ops: pd.DataFrame, path: Path) -> pd.DataFrame:
    """FLOPs, bytes and categories from XProf's op_profile, for device planes whose metadata lacks them (GPU)."""
    leaves = pd.DataFrame(xprof_tools.op_profile_leaves([path]))
    if leaves.empty:
        return ops
    by_op = leaves.groupby(["program_id", "name"])
    prof = pd.concat([by_op["category"].first(), by_op[["occurrences", "raw_flops", "raw_bytes"]].sum()], axis=1).rename(columns={"occurrences": "occ", "category": "xprof_category"}).reset_index()
    m = ops.merge(prof, how="left", left_on=["program", "name"], right_on=["program_id", "name"])
    per = m["occ"].where(m["occ"] > 0)
    ops = ops.assign(flops=(m["raw_flops"] / per).to_numpy(), bytes_accessed=(m["raw_bytes"] / per).to_numpy())
    return ops.assign(category=m["xprof_category"].where(m["xprof_category"].notna(), ops["category"]).to_numpy())


def _timeline(parts: list[pd.DataFrame | dict[str, np.ndarray]]) -> pd.DataFrame:
    """The host's timeline rows as one frame, built once from numpy columns (text as objects: a frame
    built from strings converts each to Arrow, and the reader converts them back)."""
    cols = [p if isinstance(p, dict) else {c: p[c].to_numpy() for c in TIMELINE_COLUMNS} for p in parts]
    cols = [p for p in cols if len(p["start_s"])]
    if not cols:
        return empty(TIMELINE_COLUMNS)
    return pd.DataFrame({c: np.concatenate([np.asarray(p[c], dtype=float) for p in cols]) if c in ("start_s", "end_s")
                         else pd.Series(np.concatenate([np.asarray(p[c], dtype=object) for p in cols]), dtype=object) for c in TIMELINE_COLUMNS})


def read_host(path: Path, host: int | None) -> HostTables:
    """The tables of one host's XSpace; `host` (its index in a multi-host capture) prefixes its devices."""
    path = Path(path)
    prefix = "" if host is None else f"host{host}/"
    all_ops, all_steps, devices = [], [], []
    timeline: list[pd.DataFrame | dict[str, np.ndarray]] = []
    info = SpaceInfo()
    device_ops = False
    zero = None
    try:
        for plane in planes(path, info):
            m = _DEVICE_PLANE.match(plane.name)
            if m:
                device = f"{prefix}{m['kind']}:{m['idx']}"
                ops, steps, programs, dev = _device_tables(device, plane)
                devices.append(dev)
                all_steps.append(steps)
                timeline.append(programs)
                if ops:
                    all_ops.append(ops)
                    device_ops = device_ops or m["kind"] != "CPU"
            elif plane.name == "Task Environment" and plane.stats.get("profile_start_time"):
                zero = float(plane.stats["profile_start_time"]) / 1e9
            elif plane.name == "/host:CPU":
                host_tl, steps, cpu_ops = _host_tables(plane, prefix)
                timeline.append(host_tl)
                all_steps.append(steps)
                if not cpu_ops.empty:
                    all_ops.append({**{c: cpu_ops[c].to_numpy() for c in cpu_ops.columns}, "_cpu": None})
    except DataError:
        raise
    except DamagedXSpace as exc:
        raise DataError(f"{path}: not a readable XSpace ({exc}); the file is truncated or damaged") from None
    except Exception as exc:  # protobuf's DecodeError from a damaged line
        if type(exc).__name__ != "DecodeError":
            raise
        raise DataError(f"{path}: not a readable XSpace ({type(exc).__name__}: {exc}); the file is truncated or damaged") from None
    has_accel = any(str(d["name"]).startswith(("/device:TPU", "/device:GPU")) for d in devices)
    all_ops = [o for o in all_ops if not (has_accel and "_cpu" in o)]  # XLA:CPU ops only when no accelerator ran
    if not has_accel and any("_cpu" in o for o in all_ops):
        cpu = next(o for o in all_ops if "_cpu" in o)
        devices.append({"id": cpu["device"][0], "name": "/host:CPU", "kind": "cpu", "chip": None, "cores": None, "peak_tflops": None, "peak_hbm_gbps": None, "source": None})
    devices_df = pd.DataFrame({c: pd.Series([d.get(c) for d in devices], dtype=None if c.startswith("peak_") else object) for c in DEVICE_COLUMNS}) if devices else empty(DEVICE_COLUMNS)
    ops_raw = _raw_ops(all_ops)
    if not ops_raw:
        ops = empty(OPS_COLUMNS)
    else:
        if device_ops and np.isnan(ops_raw["flops"]).all():
            prof = _with_op_profile(pd.DataFrame({c: pd.Series(v, dtype=object) if c in _TEXT_OPS else v for c, v in ops_raw.items()}), path)
            ops_raw = {c: prof[c].to_numpy(dtype=object if c in _TEXT_OPS else float) for c in _RAW_OPS}
        agg, group = _aggregate(ops_raw)
        ops = add_boundness(agg, devices_df).reindex(columns=list(OPS_COLUMNS))
        timeline.append({"lane": ops_raw["device"], "kind": _row_op_class(agg, group), "name": ops_raw["name"],
                         "start_s": ops_raw["start_ns"] / 1e9, "end_s": ops_raw["end_ns"] / 1e9})
    steps = [s for s in all_steps if not s.empty]
    return HostTables(
        ops=ops, timeline=_timeline(timeline),
        device_steps=pd.concat(steps, ignore_index=True).reindex(columns=list(STEP_COLUMNS)) if steps else empty(STEP_COLUMNS),
        devices=devices_df, hostname=(info.hostnames or [path.name.removesuffix(".xplane.pb")])[0], clock_zero_s=zero,
    )
