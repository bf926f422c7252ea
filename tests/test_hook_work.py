"""The recorder's per-step work on the loop's thread, counted (Python calls per step), not timed: a
bound that keeps the per-dispatch hook from growing back (docs/traces.md, "What recording costs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import tpu_perf_cli

SCRIPT = Path(__file__).parent / "scripts" / "jax_hook_work.py"
LEAVES = 64

HOOK_CALLS_PER_STEP = 70
"""Python calls per synced step on the loop's thread, the loop's own and the recorder's together,
with a train state of 64 arrays: 54 measured (the plain loop: 13; 61 while the hook read the trace
window's state every step with no window to open). Before the watched output was kept per
function, reading every output's size made it 10 calls per array (520 here)."""

WATCHER_CALLS_PER_STEP = 30
"""Python calls per step on the ready watcher's thread: 17 measured (its wake-up, the stamp, the
hand-over; 24 before its one look and one wait per call), none per array."""

pytestmark = pytest.mark.slow  # records a real script in a subprocess


def _top(calls: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:12])


def test_the_hooks_work_per_step_is_bounded_and_not_per_array(tmp_path: Path) -> None:
    out = tmp_path / "calls.json"
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), str(SCRIPT), str(out), "--leaves", str(LEAVES))
    assert proc.returncode == 0, proc.stderr
    counted = json.loads(out.read_text())["calls_per_step"]
    loop = counted["MainThread"]
    assert loop.get("jit.py:call") == pytest.approx(1.0)  # the hook ran once per step: the count is of a recorded loop
    assert sum(loop.values()) <= HOOK_CALLS_PER_STEP, _top(loop)
    assert max(loop.values()) < LEAVES / 2, _top(loop)  # nothing runs once per array of the state
    watcher = counted.get("tpu-perf-ready", {})
    assert watcher.get("jit.py:_finished", 0) >= 0.9, _top(watcher)  # the watcher handed over every step (the sync may have stamped some), counted until it had, however far behind the loop it ran
    assert sum(watcher.values()) <= WATCHER_CALLS_PER_STEP, _top(watcher)
