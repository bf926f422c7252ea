"""Job tables by query: every process of a recorded job reduces its own trace window into its shard,
and the job's per-op views over hosts are one query over those shards.

The job is the session's real 2-process JAX job (conftest `jax_job`: jax_spmd.py 20 1 0.05):
process 1 does 50 ms of host work per step, process 0 waits for it inside the all-reduce."""

from __future__ import annotations

import pandas as pd
import pytest

from tpu_perf.analyzers.job_ops import SPREAD_OPS, host_top_ops, op_spread, op_time_by_host
from tpu_perf.store import load_run

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.alone]  # the session's 2-process job is recorded with nothing beside it (conftest `jax_job`)


def _shard_ops(job_dir) -> dict[int, pd.DataFrame]:
    """Each shard's ops table read alone with pandas, by process index: the reference."""
    return {int(d.name): pd.read_parquet(d / "ops.parquet") for d in sorted((job_dir / "hosts").iterdir())}


def test_each_process_reduces_its_own_trace_window_into_its_shard(jax_job: dict) -> None:
    run = load_run(jax_job["dir"])
    shards = _shard_ops(jax_job["dir"])
    assert sorted(shards) == [0, 1]
    devices = {i: set(ops["device"]) for i, ops in shards.items()}
    assert devices[0].isdisjoint(devices[1])  # each shard holds its own process's device, not process 0's
    for host in run.hosts:
        i = host.manifest["process_index"]
        own = {str(d) for d in host.table("devices")["id"]}
        assert devices[i] <= own, (i, devices[i], own)
        traced = int(host.steps["traced"].astype(bool).sum())
        [allreduce] = shards[i][shards[i]["name"].str.startswith("all-reduce")]["occurrences"]
        assert allreduce == traced >= 3  # one all-reduce per traced step, on each process


def test_the_job_aggregate_is_what_the_shards_give(jax_job: dict) -> None:
    run = load_run(jax_job["dir"])
    by_host = op_time_by_host(run)
    reference = pd.concat([ops.groupby("name")["total_time_s"].sum().rename(i) for i, ops in _shard_ops(jax_job["dir"]).items()], axis=1)
    got = by_host.pivot_table(index="name", columns="host", values="total_time_s")
    pd.testing.assert_frame_equal(got.sort_index(), reference.sort_index().rename_axis(index="name", columns="host"), check_exact=False, rtol=1e-12)
    doc = jax_job["report"]
    # the ops with the most time over all hosts, most first (ops of equal time, XLA:CPU's identical
    # small fusions, may come in either order: CI once swapped two)
    totals = reference.sum(axis=1)
    shown = [s["op"] for s in doc["ops_spread"]]
    assert len(shown) == len(set(shown)) == min(SPREAD_OPS, len(totals))
    values = [float(totals[op]) for op in shown]
    assert all(a >= b - 1e-9 for a, b in zip(values, values[1:], strict=False)), values
    assert float(totals.drop(shown).max()) <= values[-1] + 1e-9 if len(totals) > len(shown) else True
    for s in doc["ops_spread"]:
        row = reference.loc[s["op"]]
        assert (s["hosts"], s["min_s"], s["max_s"], s["slowest_host"]) == (2, pytest.approx(row.min()), pytest.approx(row.max()), int(row.idxmax()))
        assert s["median_s"] == pytest.approx(row.median())
    assert [s["op"] for s in doc["ops_spread"]] == [s.op for s in op_spread(by_host)]
    for h in doc["hosts"]:
        mine = reference[h["process_index"]]
        top = mine.sort_values(ascending=False).head(5)
        assert [o["total_time_s"] for o in h["top_ops"]] == [pytest.approx(t) for t in top]  # the five largest, most first
        assert all(o["total_time_s"] == pytest.approx(mine[o["name"]]) for o in h["top_ops"])  # each its own op's (ties in either order)
        assert [o["name"] for o in h["top_ops"]] == [o.name for o in host_top_ops(by_host, h["process_index"])]


def test_the_waiting_host_is_the_slowest_in_the_collective_and_the_straggler_is_host_work(jax_job: dict) -> None:
    doc = jax_job["report"]
    collective = next(s for s in doc["ops_spread"] if s["op"].startswith("all-reduce"))
    # process 0 waits for process 1's 50 ms of host work inside the all-reduce, 3 traced steps
    assert collective["slowest_host"] == 0 and collective["max_s"] - collective["min_s"] > 0.03 * 3 * 0.7
    fast, slow = doc["hosts"]
    assert fast["top_ops"][0]["name"].startswith("all-reduce") and fast["top_ops"][0]["share"] > 0.9
    assert fast["breakdown"]["collective"] > 0.5 and slow["breakdown"]["host"] > 0.5  # each host's own breakdown
    [straggler] = doc["stragglers"]
    assert straggler["process_index"] == 1 and straggler["op"] is None  # its extra is time.sleep, in no op
    assert "per step against" not in straggler["text"].split("the job waits for it")[-1]


def test_the_text_report_shows_each_hosts_top_op_and_the_ops_over_hosts(jax_job: dict) -> None:
    from rich.console import Console

    from tpu_perf.views.hosts import render_hosts

    console = Console(record=True, width=220)
    console.print(render_hosts(jax_job["report"]))
    text = console.export_text()
    spread = jax_job["report"]["ops_spread"][0]
    assert "Ops over hosts (trace window)" in text and spread["op"] in text.split("Ops over hosts")[1]
    assert text.count("all-reduce.2 (") == 2  # each process's top op, with its share
