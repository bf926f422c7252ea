"""A thread put off its core by another process: Linux's scheduler statistics count the wait
(collectors/core_wait.py), each step records it (`core_wait_s`), and the advisor does not read the
gaps it leaves in an eager PyTorch trace as the loop's own host work.

The other process is a real busy loop pinned to the same core as the thread under test (`taskset`,
`os.sched_setaffinity`): the kernel shares that core between them, whatever else the machine runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, advice_doc, report_doc, user_env
from tests.invariants import check_run
from tpu_perf import load_run
from tpu_perf.collectors.core_wait import core_wait

HOG = "while True: pass"


@contextlib.contextmanager
def busy_core(cpu: int) -> Iterator[None]:
    """A busy loop in its own process, pinned to `cpu`, for the duration of the block."""
    hog = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        time.sleep(0.2)  # running before the block measures
        yield
    finally:
        hog.kill()
        hog.wait()


def test_a_thread_sharing_its_core_with_a_busy_process_waits_about_as_long_as_it_runs() -> None:
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # this thread only (Linux: pid 0 is the calling thread)
    try:
        with busy_core(cpu):
            tid, start = core_wait()
            cpu0 = time.thread_time()
            while time.thread_time() - cpu0 < 0.2:  # 0.2 s on the core
                pass
            _, end = core_wait()
    finally:
        os.sched_setaffinity(0, before)
    assert tid == threading.get_native_id()
    assert end - start >= 0.1, f"waited {end - start:.3f} s for a core while running 0.2 s beside a busy process on it"


@pytest.mark.slow
def test_a_torch_loop_sharing_its_core_is_not_called_input_bound(tmp_path: Path) -> None:
    """tests/torch_scripts/lm.py (an eager PyTorch LM, its batch in memory: not input-bound) recorded
    on one core with a busy process on it: its thread waits for the core about half of each step."""
    store = tmp_path / "runs"
    cpu = min(os.sched_getaffinity(0))
    cmd = [sys.executable, "-m", "tpu_perf", "record", "-q", "--store", str(store), "--name", "shared", str(ROOT / "tests" / "torch_scripts" / "lm.py"), str(tmp_path / "lm.json"), "20", "manual", "adamw"]
    with busy_core(cpu):
        proc = subprocess.run(cmd, env={**user_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert proc.returncode == 0, proc.stderr
    run = load_run(next(store.iterdir()))
    doc = check_run(run, report_doc("shared", store))
    waits = pd.to_numeric(run.table("steps")["core_wait_s"], errors="coerce")
    assert waits.notna().sum() >= 15 and waits.sum() > 0.2 * run.table("steps")["duration_s"].sum()
    detail = doc["breakdown_detail"]
    assert detail["core_wait_share"] >= 0.2 and "waited for a CPU core" in detail["note"]
    bound = {f["id"]: f for f in advice_doc("shared", store)["findings"]}["input-bound"]
    assert bound["outcome"] != "fired", bound["reason"]
    evidence = {e["name"]: e["value"] for e in bound["evidence"]}
    assert evidence["trace_core_wait_fraction"] == pytest.approx(detail["core_wait_share"], rel=1e-5)


def test_a_forked_child_reads_its_own_thread() -> None:
    parent = core_wait()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own thread id, not the parent's file
        try:
            got = core_wait()
            os.write(write, str(got[0] if got else -1).encode())
        finally:
            os._exit(0)
    os.close(write)
    child_tid = int(os.read(read, 64) or b"-1")
    os.waitpid(pid, 0)
    os.close(read)
    assert parent is not None and child_tid == pid != parent[0]
