"""The store stamp that lets a page's rerun skip listing the store: it changes with any change a
listing would see (a run added, removed, written to, a table made unreadable, a job's shard
written), and only then."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tpu_perf.dashboard.stamp import store_stamp


def test_store_stamp_changes_with_what_a_listing_sees(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    run = store / "20260101-000000-aaaaaa"
    (run / "hosts" / "p1").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "steps.parquet").write_bytes(b"x")
    (run / "hosts" / "p1" / "steps.parquet").write_bytes(b"x")
    stamps = [store_stamp(str(store))]
    assert stamps[0] is not None and stamps[0] == store_stamp(str(store))  # nothing changed: the same
    changes = [
        lambda: (run / "steps.parquet").write_bytes(b"xy"),  # a live run writes its table
        lambda: os.chmod(run / "steps.parquet", 0o000),  # made unreadable: ctime, not mtime
        lambda: (run / "hosts" / "p1" / "steps.parquet").write_bytes(b"xy"),  # a job's shard
        lambda: (store / "20260101-000001-bbbbbb").mkdir(),  # a new run
        lambda: os.rmdir(store / "20260101-000001-bbbbbb"),  # removed again
    ]
    for change in changes:
        time.sleep(0.01)  # coarse clocks: a later time stamp
        change()
        stamps.append(store_stamp(str(store)))
        assert stamps[-1] != stamps[-2], change
    assert store_stamp(str(tmp_path / "absent")) is None  # unreadable: listed every time
