"""The runtime sampler against a real RuntimeMetricService on loopback, recorded in-process.

A real Recorder, RunWriter, Sampler and gRPC client read a real gRPC server (tests/metric_server.py,
built on the tpu-info stubs) that serves values changing every 0.2 s for its own 3 devices. The
recorded timeline must be what the server sent at the sample times, device by device.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from metric_server import (
    EXEC_BUCKETS,
    EXEC_GROWTH,
    EXEC_SCALE_US,
    TOTAL_BYTES,
    MetricServer,
    bucket_index,
    duty_pct,
    exec_base_us,
    queue_size,
    usage_bytes,
)
from recording import record_in_process

import tpu_perf
from tpu_perf.analyzers.memory import analyze_memory
from tpu_perf.analyzers.runtime import analyze_runtime, histogram_percentile
from tpu_perf.analyzers.timeline import per_step

LATENCY_S = 0.5
"""Most time between a sample's timestamp (taken before the calls) and the server answering: the
calls' deadline. Typical is ~1 ms; the server shares this process (and its GIL) with a busy loop."""
CLOCK_EPS_S = 0.005
"""Recorder clock (monotonic, anchored to epoch once) vs the server's time.time()."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[MetricServer, tpu_perf.Run]:
    server = MetricServer(devices=3, period_s=0.2).start()
    try:
        run, _ = record_in_process(tmp_path_factory.mktemp("runs"), server.addr, steps=12, step_s=0.1, batch_size=32)
    finally:
        server.kill()
    return server, run


def _served_near(server: MetricServer, metric: str, t: float) -> list[tuple[float, dict[int, float]]]:
    """Answers the server sent after the sample's timestamp and within the calls' deadline."""
    return [(ts, values) for ts, name, values in server.served if name == metric and t - CLOCK_EPS_S <= ts <= t + LATENCY_S]


def test_memory_timeline_matches_what_was_served(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    server, run = served
    rows = run.memory[run.memory["source"] == "libtpu"]
    assert sorted(rows["device"].unique()) == ["tpu:0", "tpu:1", "tpu:2"]
    # ~1.2 s of steps at 0.1 s; the loop holds the GIL (pure Python), so the sampler thread gets it
    # only at the interpreter's switch interval and lands fewer samples than 12.
    assert len(rows) >= 3 * 5
    latencies = []
    for row in rows.itertuples():
        d = int(row.device.split(":")[1])
        tick = (row.bytes_in_use - usage_bytes(d, 0)) // (2**20)
        assert row.bytes_in_use == usage_bytes(d, tick)
        start, end = server.tick_window(tick)
        assert start - LATENCY_S <= row.time_s <= end + CLOCK_EPS_S, (row, start, end)
        assert row.limit_bytes == TOTAL_BYTES
        answers = [ts for ts, v in _served_near(server, "tpu.runtime.hbm.memory.usage.bytes", row.time_s) if v[d] == row.bytes_in_use]
        assert answers, row
        latencies.append(min(answers) - row.time_s)
    assert np.median(latencies) < 0.05  # the value is the one served at the sample time
    # values change over time: the timeline is not one repeated answer
    assert rows[rows["device"] == "tpu:0"]["bytes_in_use"].nunique() >= 4


def test_duty_cycle_and_queue_timeline_match_what_was_served(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    server, run = served
    runtime = run.table("runtime")
    rows = runtime[runtime["source"] == "libtpu"]
    assert sorted(rows["device"].unique()) == ["tpu:0", "tpu:1", "tpu:2"]
    for row in rows.itertuples():
        d = int(row.device.split(":")[1])
        near = _served_near(server, "tpu.runtime.tensorcore.dutycycle.percent", row.time_s)
        assert any(v[d] == row.duty_cycle_pct for _, v in near), row
        tick = server.tick(row.time_s)
        assert row.duty_cycle_pct in {duty_pct(d, k) for k in (tick - 1, tick, tick + 1)}
        assert row.hlo_queue_size in {queue_size(d, k) for k in (tick - 1, tick, tick + 1)}
        assert len(row.exec_bucket_counts) == EXEC_BUCKETS + 2
        assert len(row.exec_bucket_bounds_us) == EXEC_BUCKETS + 1


def test_host_rows_always_present(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    _, run = served
    host = run.memory[run.memory["device"] == "host"]
    assert (host["bytes_in_use"] > 10 * 2**20).all()
    cpu = run.table("runtime")
    cpu = cpu[cpu["device"] == "host"]
    assert len(cpu) >= 5 and cpu["cpu_percent"].between(0, 100 * 64).all()
    # the busy loop kept this process on a core most of the time
    assert cpu["process_cpu_percent"].median() > 30


def test_percentiles_from_raw_buckets(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    _, run = served
    stats = analyze_runtime(run)
    assert [d.device for d in stats.per_device] == ["tpu:0", "tpu:1", "tpu:2"]
    bounds = [EXEC_SCALE_US * EXEC_GROWTH**i for i in range(EXEC_BUCKETS + 1)]
    for d, dev in enumerate(stats.per_device):
        base = exec_base_us(d)
        lo, hi = bounds[bucket_index(base) - 1], bounds[bucket_index(base)]
        assert lo <= dev.exec_p50_us <= hi  # 90 % of executions took `base`
        lo, hi = bounds[bucket_index(10 * base) - 1], bounds[bucket_index(10 * base)]
        assert lo <= dev.exec_p99_us <= hi  # the slowest 10 % took 10 x base
        assert dev.exec_count > 0 and dev.exec_count % 10 == 0  # whole ticks of 10 executions
        assert dev.source == "libtpu"
    assert stats.sources == ["libtpu"]


def test_rows_scanned_without_their_histograms(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    """The runtime analysis scans the table without its list columns and takes the histograms it
    needs apart: the same answer as from the whole table, read first."""
    _, run = served
    lean, whole = tpu_perf.load_run(run.url), tpu_perf.load_run(run.url)
    scalars = lean.scalar_table("runtime")
    full = pd.read_parquet(run.file_path("runtime.parquet"))
    assert {"exec_bucket_counts", "exec_bucket_bounds_us"} <= set(full.columns)
    pd.testing.assert_frame_equal(scalars, full.drop(columns=["exec_bucket_counts", "exec_bucket_bounds_us"]))
    counts = lean.arrow_column("runtime", "exec_bucket_counts")
    assert counts is not None and counts.null_count < len(counts) == len(full)
    assert lean.arrow_column("runtime", "no_such_column") is None
    whole.table("runtime")  # loaded: the Arrow columns come from the frame
    assert analyze_runtime(lean) == analyze_runtime(whole)
    assert all(d.exec_count for d in analyze_runtime(lean).per_device)


def test_histograms_of_a_killed_recording_read_from_its_json_lines(served: tuple[MetricServer, tpu_perf.Run], tmp_path: Path) -> None:
    """A recording killed before its end leaves `runtime.jsonl`, not Parquet: the histograms are
    taken from the JSON lines, and the runtime analysis says what it says of the finished table."""
    _, run = served
    killed = tmp_path / run.id
    shutil.copytree(Path(run.url), killed)
    frame = pd.read_parquet(killed / "runtime.parquet")
    (killed / "runtime.jsonl").write_text(frame.to_json(orient="records", lines=True))
    (killed / "runtime.parquet").unlink()
    from_lines = tpu_perf.load_run(str(killed))
    assert from_lines.scalar_table("runtime").columns.tolist() == [c for c in frame.columns if c not in ("exec_bucket_counts", "exec_bucket_bounds_us")]
    assert from_lines.arrow_column("runtime", "exec_bucket_counts").to_pylist() == [None if c is None else list(c) for c in frame["exec_bucket_counts"]]
    got, want = analyze_runtime(from_lines), analyze_runtime(tpu_perf.load_run(run.url))
    assert got == want
    assert all(d.exec_count for d in got.per_device)


def test_histogram_percentile_interpolates_inside_buckets() -> None:
    bounds = [1.0, 2.0, 4.0]  # buckets: [0,1) [1,2) [2,4) [4,inf)
    assert histogram_percentile([0, 10, 0, 0], bounds, 50) == pytest.approx(1.5)
    assert histogram_percentile([0, 0, 4, 0], bounds, 25) == pytest.approx(2.5)
    assert histogram_percentile([0, 0, 0, 3], bounds, 50) == 4.0  # overflow: its lower bound
    assert histogram_percentile([0, 0, 0, 0], bounds, 50) is None
    samples = np.array([0.5] * 2 + [1.5] * 6 + [3.0] * 2)
    counts = np.histogram(samples, bins=[0, 1, 2, 4, np.inf])[0]
    assert 1.0 <= histogram_percentile(counts, bounds, 50) <= 2.0


def test_steps_joined_to_samples(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    server, run = served
    joined = per_step(run)
    assert len(joined) == 12
    known = joined.dropna(subset=["hbm_peak_bytes"])
    assert len(known) >= 5  # 0.1 s steps, 0.1 s samples: about half the steps hold one or more
    memory = run.memory[run.memory["source"] == "libtpu"]
    for step in known.itertuples():
        inside = memory[(memory["time_s"] >= step.start_time_s) & (memory["time_s"] < (joined["start_time_s"].iloc[step.Index + 1] if step.Index + 1 < len(joined) else np.inf))]
        assert step.hbm_peak_bytes == inside["bytes_in_use"].max()  # max over the 3 devices: tpu:2's
        assert int(step.hbm_peak_bytes) >= usage_bytes(2, 0)
    duty = joined.dropna(subset=["duty_cycle_pct"])
    assert ((duty["duty_cycle_pct"] >= 0) & (duty["duty_cycle_pct"] <= 100)).all()


def test_run_level_peak_headroom_and_batch_estimate(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    server, run = served
    mem = analyze_memory(run)
    assert [d.device for d in mem.per_device] == ["tpu:0", "tpu:1", "tpu:2"]
    libtpu = run.memory[run.memory["source"] == "libtpu"]
    for d in mem.per_device:
        assert d.peak_bytes == libtpu[libtpu["device"] == d.device]["bytes_in_use"].max()
        assert d.capacity_bytes == TOTAL_BYTES and d.source == "libtpu"
    assert mem.peak_bytes == mem.per_device[2].peak_bytes and mem.capacity_bytes == TOTAL_BYTES
    assert mem.headroom_bytes == TOTAL_BYTES - mem.peak_bytes
    assert mem.headroom_fraction == pytest.approx(1 - mem.peak_bytes / TOTAL_BYTES)
    # no XLA program here: the fixed part is the lowest usage sampled on the peak device in the steps
    assert mem.fixed_basis == "sampled_minimum"
    expected = (TOTAL_BYTES * 0.95 - mem.fixed_bytes) / (mem.peak_bytes - mem.fixed_bytes)
    assert mem.max_batch_multiplier == pytest.approx(expected)
    assert mem.max_batch_size == int(32 * expected)
    assert analyze_runtime(run).duty_cycle_pct == pytest.approx(run.table("runtime").query("source == 'libtpu'").pipe(lambda r: r[(r.time_s >= per_step(run).start_time_s.min()) & (r.time_s <= per_step(run).end_time_s.max())]).duty_cycle_pct.mean())


def test_connected_event_and_no_gaps(served: tuple[MetricServer, tpu_perf.Run]) -> None:
    _, run = served
    events = run.table("sampler")
    assert "connected" in set(events[events["source"] == "libtpu"]["event"])
    assert set(events[events["source"] == "nvml"]["event"]) == {"skipped"}  # no NVIDIA driver here
    assert analyze_runtime(run).gaps == []
