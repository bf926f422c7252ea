"""Kineto (PyTorch profiler) Chrome-trace JSON into the trace tables, streamed.

The file is decoded chunk by chunk: each event object is parsed with the standard library's C JSON
scanner and only the fields the tables need are kept (names interned), so peak memory stays a
fraction of the JSON size instead of the 5-6x a whole-document `json.load` costs.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.errors import DataError
from tpu_perf.hardware import lookup_chip
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

CHUNK_CHARS = 1 << 22
_SKIP = re.compile(r"[\s,]*")
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_COMPILE = re.compile(r"Torch-Compiled Region|TorchDynamo|CompiledFunction|inductor.*compile|compile_fx", re.I)
_INPUT = re.compile(r"DataLoader|dataloader|_next_data|enumerate\(", re.I)


class _Reader:
    """A growing text window over a (possibly gzip) file, for `raw_decode` one value at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as f:
            magic = f.read(2)
        raw = gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")  # noqa: SIM115
        self.f = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
        self.buf, self.pos, self.eof = "", 0, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> None:
        try:
            data = self.f.read(CHUNK_CHARS)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{self.path}: cannot be decompressed ({exc}); the file is truncated or damaged") from None
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        self.eof = not data

    def skip(self) -> str:
        """Skip whitespace and commas; return the next character ('' at the end)."""
        while True:
            self.pos = _SKIP.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos : self.pos + 1]
            self._more()

    def expect(self, char: str) -> None:
        found = self.skip()
        if found == "" and not self.buf:
            raise DataError(f"{self.path}: empty file; it holds no trace")
        if found != char:
            raise DataError(f"{self.path}: not a Chrome-trace JSON object (expected {char!r} at character {self.pos}); is it a Kineto trace?")
        self.pos += 1

    def value(self) -> Any:
        self.skip()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:
                    self.pos = end
                    return value
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise DataError(f"{self.path}: truncated or invalid JSON ({exc.msg} near character {exc.pos}); re-export the trace") from None
            self._more()

    def close(self) -> None:
        self.f.close()


def _scan(path: Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Header keys (everything but the events) and column lists of the complete ('X') events."""
    cols: dict[str, list[Any]] = {k: [] for k in ("cat", "name", "pid", "tid", "ts", "dur", "device")}
    intern: dict[str, str] = {}
    header: dict[str, Any] = {}
    r = _Reader(path)
    try:
        r.expect("{")
        while r.skip() not in ("}", ""):
            key = r.value()
            r.expect(":")
            if key != "traceEvents":
                header[key] = r.value()
                continue
            r.expect("[")
            while r.skip() not in ("]", ""):
                ev = r.value()
                if not isinstance(ev, dict) or ev.get("ph") != "X":
                    continue
                name = str(ev.get("name", ""))
                cols["name"].append(intern.setdefault(name, name))
                cat = str(ev.get("cat", ""))
                cols["cat"].append(intern.setdefault(cat, cat))
                cols["pid"].append(str(ev.get("pid", "")))
                cols["tid"].append(str(ev.get("tid", "")))
                cols["ts"].append(ev.get("ts", 0.0))
                cols["dur"].append(ev.get("dur", 0.0))
                args = ev.get("args")
                cols["device"].append(args.get("device") if isinstance(args, dict) else None)
            r.expect("]")
        if r.skip() != "}":
            raise DataError(f"{path}: truncated JSON (the trace ends before its closing brace); re-export the trace")
    finally:
        r.close()
    return header, cols


def _frame(cols: dict[str, list[Any]]) -> pd.DataFrame:
    df = pd.DataFrame({
        "cat": pd.Categorical(cols["cat"]), "name": cols["name"], "pid": cols["pid"], "tid": cols["tid"],
        "start_s": np.asarray(pd.to_numeric(pd.Series(cols["ts"]), errors="coerce"), dtype=float) / 1e6,
        "dur_s": np.asarray(pd.to_numeric(pd.Series(cols["dur"]), errors="coerce"), dtype=float) / 1e6,
        "device": pd.to_numeric(pd.Series(cols["device"], dtype="object"), errors="coerce"),
    })
    df["end_s"] = df["start_s"] + df["dur_s"].fillna(0.0)
    return df


def _devices(header: dict[str, Any], used: list[int]) -> pd.DataFrame:
    props = {int(p.get("id", i)): p for i, p in enumerate(header.get("deviceProperties") or []) if isinstance(p, dict)}
    rows = []
    for dev in used:
        p = props.get(dev, {})
        kind = str(p.get("name") or "GPU")
        chip = lookup_chip(kind)
        rows.append({"id": f"GPU:{dev}", "name": kind, "kind": kind, "chip": chip.name if chip else None, "cores": p.get("numSms"),
                     "peak_tflops": chip.peak_tflops_per_device() if chip else None, "peak_hbm_gbps": chip.hbm_gbps if chip else None,
                     "source": "catalogue" if chip else None})
    return pd.DataFrame(rows).reindex(columns=list(DEVICE_COLUMNS)) if rows else empty(DEVICE_COLUMNS)


def _ops(events: pd.DataFrame, lane: pd.Series) -> pd.DataFrame:
    ev = events.assign(lane=lane.to_numpy(), category=events["cat"].astype(str))
    agg = ev.groupby(["lane", "name", "category"], sort=False, observed=True).agg(
        occurrences=("name", "size"), total_time_s=("dur_s", "sum"), self_time_s=("self_s", "sum")).reset_index()
    agg = agg.rename(columns={"lane": "device"}).assign(program=None, fusion_kind=None, flops=None, bytes_accessed=None)
    agg["op_class"] = classify_ops(agg["name"], agg["category"])
    return agg


def read_kineto(path: Path, rank: int | None = None) -> TraceTables:
    """Tables from one Kineto trace (one rank). GPU kernels are device ops; a CPU-only trace's
    `cpu_op` events are, with self time from their nesting per thread."""
    header, cols = _scan(Path(path))
    events = _frame(cols)
    if events.empty:
        raise DataError(f"{path}: the trace holds no complete ('X') events; was the profiler stopped before a step ran?")
    rank = rank if rank is not None else (header.get("distributedInfo") or {}).get("rank")
    prefix = f"rank{rank}/" if rank is not None else ""
    is_dev = events["cat"].isin(_DEVICE_CATS).to_numpy()
    dev = events[is_dev].copy()
    if not dev.empty:
        dev["device"] = dev["device"].fillna(pd.to_numeric(dev["pid"], errors="coerce")).fillna(0).astype(int)
        dev["self_s"] = dev["dur_s"]
        lanes = prefix + "GPU:" + dev["device"].astype(str)
        devices = _devices(header, sorted(dev["device"].unique().tolist()))
        devices["id"] = prefix + devices["id"]
        ops_src = dev
    else:
        cpu = events[events["cat"].astype(str) == "cpu_op"].copy()
        cpu["self_s"] = 0.0
        for _, grp in cpu.groupby(["pid", "tid"], sort=False):
            cpu.loc[grp.index, "self_s"] = self_times(grp["start_s"].to_numpy(float), grp["end_s"].to_numpy(float))
        lanes = pd.Series(prefix + "CPU:0", index=cpu.index)
        devices = pd.DataFrame([{"id": prefix + "CPU:0", "name": "cpu", "kind": "cpu"}]).reindex(columns=list(DEVICE_COLUMNS))
        ops_src = cpu
    ops = _ops(ops_src, lanes) if not ops_src.empty else empty(OPS_COLUMNS)
    if not ops.empty:
        ops = add_boundness(ops, devices).reindex(columns=list(OPS_COLUMNS))
        classes = dict(zip(zip(ops["device"], ops["name"], strict=False), ops["op_class"], strict=False))
        kinds = [classes.get(k, "compute") for k in zip(lanes, ops_src["name"], strict=False)]
        device_tl = pd.DataFrame({"lane": lanes.to_numpy(), "kind": kinds, "name": ops_src["name"].to_numpy(), "start_s": ops_src["start_s"].to_numpy(), "end_s": ops_src["end_s"].to_numpy()})
    else:
        device_tl = empty(TIMELINE_COLUMNS)
    host = events[~is_dev]
    names = host["name"]
    step_m = names.str.extract(_STEP, expand=False)
    is_step = step_m.notna() & (host["cat"].astype(str) != "gpu_user_annotation")
    steps = host[is_step].sort_values("start_s")
    steps_df = pd.DataFrame({"device": prefix + "host", "step": np.arange(len(steps)), "step_num": step_m[is_step].loc[steps.index].astype(int).to_numpy(),
                             "name": steps["name"].to_numpy(), "start_s": steps["start_s"].to_numpy(), "end_s": steps["end_s"].to_numpy(),
                             "duration_s": steps["dur_s"].to_numpy(), "source": "annotation"}).reindex(columns=list(STEP_COLUMNS))
    marks = []
    for kind, rx in (("compile", _COMPILE), ("input", _INPUT)):
        m = host[names.str.contains(rx, na=False)]
        marks.append(pd.DataFrame({"lane": prefix + "host", "kind": kind, "name": m["name"], "start_s": m["start_s"], "end_s": m["end_s"]}))
    marks.append(pd.DataFrame({"lane": prefix + "host", "kind": "step", "name": steps["name"], "start_s": steps["start_s"], "end_s": steps["end_s"]}))
    timeline = pd.concat([device_tl, *[m for m in marks if not m.empty]], ignore_index=True).reindex(columns=list(TIMELINE_COLUMNS))
    platform = "gpu" if not dev.empty else "cpu"
    return TraceTables(ops=ops, timeline=timeline, device_steps=steps_df, devices=devices, format="kineto", platform=platform, files=(str(path),))
