"""Invariants every recording must satisfy; recording tests call `check_run` on their runs.

- window parts sum to the window, and recorder windows are the steps' iterations (or, when the
  host ran ahead, one device window per traced step and lane);
- device time <= iteration (plus the breakdown's alignment error); ready stamps in dispatch order;
- op time per step per device <= device time per step (within the alignment error and a poll);
- shares are in [0, 1] and sum to 1;
- no negative host, device, wait or own-work time;
- unknown is null: the report's JSON holds no NaN or infinity;
- PyTorch on a CPU never runs ahead of its device.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from tpu_perf.analyzers.breakdown import PARTS, analyze_breakdown
from tpu_perf.analyzers.hosts import steps_by_host
from tpu_perf.analyzers.steps import can_run_ahead
from tpu_perf.store import Run
from tpu_perf.traces.tables import OP_CLASSES

SUM_TOLERANCE = 0.02
"""Parts sum to their window within 2 % (the issue's bound; the sweep line makes them exact)."""
STAMP_SLACK_S = 0.002
"""Slack for a device time stamped by the watcher (its wake-up, and the interpreter lock after it)."""


CORE_WAIT_SLACK_S = 0.004
"""A step's core wait is read just after its start is stamped: a thread put off its core between the
two (one 4 ms scheduler slice at most) counts it in the step before."""


def check_run(run: Run, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assert the invariants on `run` (and its report `doc`, built when not given); returns the doc."""
    from tpu_perf.analyzers.report import build_report

    doc = doc if doc is not None else build_report(run).to_dict()
    _no_nan(doc)
    steps = run.table("steps")
    bd = analyze_breakdown(run)
    assert bd.alignment_error_s is None or math.isfinite(bd.alignment_error_s), f"alignment error {bd.alignment_error_s}: unknown is None"
    assert bd.alignment_error_s is None or bd.alignment_error_s >= 0, f"alignment error {bd.alignment_error_s}: a size, never negative"
    error = bd.alignment_error_s or 0.0
    if not steps.empty:
        duration = steps["duration_s"].astype(float)
        assert (duration >= 0).all(), "negative iteration"
        for column in ("device_s", "wait_s", "call_s", "loop_s"):
            if column in steps:
                values = pd.to_numeric(steps[column], errors="coerce").dropna()
                assert (values >= 0).all(), f"negative {column}"
                assert (values <= duration[values.index] + error + 1e-9).all(), f"{column} longer than its iteration: {(values - duration[values.index]).max()}"
        if "core_wait_s" in steps:  # read as the steps start, a few microseconds off their stamps (CORE_WAIT_SLACK_S)
            waits = pd.to_numeric(steps["core_wait_s"], errors="coerce").dropna()
            assert (waits >= 0).all(), "negative core_wait_s"
            assert (waits <= duration[waits.index] + CORE_WAIT_SLACK_S).all(), f"core_wait_s longer than its iteration: {(waits - duration[waits.index]).max()}"
        if "loop_s" in steps:  # the loop's own work and the calls never overlap
            both = (pd.to_numeric(steps["call_s"], errors="coerce") + pd.to_numeric(steps["loop_s"], errors="coerce")).dropna()
            assert (both <= duration[both.index] + 1e-9).all(), "call_s + loop_s longer than the iteration"
        if "ready_time_s" in steps:  # outputs are seen ready after their dispatch
            ready = pd.to_numeric(steps["ready_time_s"], errors="coerce")
            assert (ready.dropna() >= steps["start_time_s"][ready.notna()] - 1e-9).all(), "outputs ready before their dispatch"
            stamps = ready.dropna()  # a device finishes a process's steps in order
            assert (stamps.diff().dropna() >= -1e-9).all(), f"ready stamps out of dispatch order: {stamps[stamps.diff() < 0].index.tolist()}"
    s = doc["steps"]
    if not can_run_ahead(run):  # PyTorch on a CPU queues nothing: never a device pace or a mean iteration
        assert not s.get("runs_ahead"), s.get("step_basis")
    for key in ("device_median_s", "host_median_s", "call_median_s", "loop_median_s"):
        assert s.get(key) is None or s[key] >= 0, f"negative {key}"
    if s.get("device_median_s") is None and s.get("count"):
        assert s.get("device_reason"), "an unknown device time says why"
    _check_breakdown(run, bd, doc, steps, error)
    hosts = steps_by_host(run)
    if not hosts.empty:
        assert (hosts["own_s"].dropna() >= 0).all(), "negative own work"
    return doc


def _check_breakdown(run: Run, bd: Any, doc: dict[str, Any], steps: pd.DataFrame, error: float) -> None:
    shares = doc.get("breakdown") or {}
    if shares:
        assert all(0.0 <= v <= 1.0 for v in shares.values()), shares
        assert math.isclose(sum(shares.values()), 1.0, abs_tol=1e-6), shares
    per = bd.per_step
    if per.empty:
        assert not (doc.get("breakdown_detail") or {}).get("steps"), "a whole-trace breakdown gives nothing per step"
        return
    total = per[list(PARTS)].sum(axis=1)
    assert ((total - per["step_s"]).abs() <= SUM_TOLERANCE * per["step_s"] + 1e-9).all(), "window parts do not sum to the window"
    long = per["long_host_s"].astype(float)
    assert ((long >= 0) & (long <= per["host"] + 1e-9) | long.isna()).all(), "long host stretches are part of the host time"
    core_wait = (doc.get("breakdown_detail") or {}).get("core_wait_share")
    assert core_wait is None or 0.0 <= core_wait <= 1.0, f"core_wait_share {core_wait}"
    if bd.steps_from == "recorder":
        iteration = steps.set_index("step")["duration_s"].astype(float)
        assert (per["step_s"] - iteration.reindex(per["step"]).to_numpy()).abs().max() < 1e-6, "recorder windows are the iterations"
        device = pd.to_numeric(steps.set_index("step")["device_s"], errors="coerce").reindex(per["step"]).to_numpy()
        ops = per[list(OP_CLASSES)].sum(axis=1).to_numpy()
        known = ~pd.isna(device)
        slack = error + STAMP_SLACK_S + 0.05 * per["step_s"].to_numpy()
        assert (ops[known] <= device[known] + slack[known]).all(), f"op time per step above the device time: {list(zip(ops, device, strict=True))}"
    elif bd.steps_from == "device":  # the host ran ahead: windows are where the device ran the traced steps
        traced = steps[steps["traced"].fillna(False).astype(bool)]
        ready = pd.to_numeric(traced["ready_time_s"], errors="coerce")
        assert (ready > traced["end_time_s"] + 0.001).sum() * 2 > ready.notna().sum(), "device windows only when most traced steps were ready after their iterations"
        for _, lane in per.groupby("lane"):
            assert sorted(lane["step"]) == sorted(traced["step"]), "one device window per traced step and lane"
        assert bd.device_check is not None and bd.device_check["recorded_median_s"] is not None, "device windows are checked against the ready stamps"


def _no_nan(doc: dict[str, Any]) -> None:
    json.dumps(doc, allow_nan=False)
