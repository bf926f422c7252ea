"""`tpu-perf import` of a multi-host XProf capture: a job run with one shard per host, each written by
its own task (in-process pool or Ray), whose tables are that host's file read alone.

The capture is 8 hosts of the real TPU v6e x4 capture (tests/data), each with its own hostname;
host 5's copy is stretched 1.5x in time (every duration and offset), so it is the slow host."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import DATA, report_doc, tpu_perf_cli
from tpu_perf.analyzers.job_ops import op_time_by_host
from tpu_perf.errors import UsageError
from tpu_perf.store import load_run
from tpu_perf.traces.xplane_synth import repeat_in_time, with_hostname, write_pod
from tpu_perf.traces.xspace import read_xspace

TPU = DATA / "tpu_v6e_x4_inference.xplane.pb"
HOSTS, SLOW = 8, 5


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    files = write_pod(TPU, tmp_path_factory.mktemp("pod"), hosts=HOSTS, copies=1)
    files[SLOW].write_bytes(with_hostname(repeat_in_time(TPU.read_bytes(), 1, stretch=1.5), f"host{SLOW:02d}"))
    return files


@pytest.fixture(scope="module")
def pool_run(pod: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("pool")
    proc = tpu_perf_cli("import", str(pod[0].parents[2]), "--store", str(store), check=True)
    return Path(proc.stdout.strip())


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns as objects with None for unknown (as Parquet reads them back or not), rows by op."""
    out = df.sort_values(["device", "program", "name"]).reset_index(drop=True)
    for c in out.columns:
        if not pd.api.types.is_numeric_dtype(out[c].dtype):
            out[c] = out[c].astype(object).where(out[c].notna(), None)
    return out


def _ops(run_dir: Path, host: int) -> pd.DataFrame:
    return _plain(pd.read_parquet(run_dir / "hosts" / str(host) / "ops.parquet"))


def test_each_host_is_a_shard_holding_that_file_read_alone(pod: list[Path], pool_run: Path) -> None:
    run = load_run(pool_run)
    assert run.is_job and [h.manifest["process_index"] for h in run.hosts] == list(range(HOSTS))
    assert [h.manifest["host"] for h in run.hosts] == [f"host{i:02d}" for i in range(HOSTS)]
    for i in (0, SLOW):
        alone = _plain(read_xspace([pod[i]]).ops)
        pd.testing.assert_frame_equal(_ops(pool_run, i), alone, check_dtype=False)
        assert (pool_run / "hosts" / str(i) / "trace/plugins/profile/imported" / pod[i].name).read_bytes() == pod[i].read_bytes()
    # the job's op totals are the whole capture's, read in one process
    whole = read_xspace(pod, workers=1).ops
    whole_total = whole.assign(name=whole["name"]).groupby("name")["total_time_s"].sum()
    job_total = op_time_by_host(run).groupby("name")["total_time_s"].sum()
    pd.testing.assert_series_equal(job_total.sort_index(), whole_total.sort_index(), check_exact=False, rtol=1e-3, check_names=False)


def test_the_report_names_each_hosts_top_ops_and_the_slow_host_per_op(pool_run: Path) -> None:
    doc = report_doc(pool_run)
    assert doc["job"]["processes"] == HOSTS and doc["job"]["missing"] == []
    assert [h["hostname"] for h in doc["hosts"]] == [f"host{i:02d}" for i in range(HOSTS)]
    fast, slow = doc["hosts"][0], doc["hosts"][SLOW]
    assert len(fast["top_ops"]) == 5 and [o["name"] for o in fast["top_ops"]] == [o["name"] for o in slow["top_ops"]]
    for a, b in zip(fast["top_ops"], slow["top_ops"], strict=True):
        assert b["total_time_s"] == pytest.approx(1.5 * a["total_time_s"], rel=1e-3)
    assert fast["breakdown"] is not None and slow["breakdown"]["data_movement"] == pytest.approx(fast["breakdown"]["data_movement"], abs=0.01)
    assert len(doc["ops_spread"]) == min(20, _ops(pool_run, 0)["name"].nunique()) == 17  # every op the capture has
    for s in doc["ops_spread"]:
        assert s["hosts"] == HOSTS and s["slowest_host"] == SLOW and s["min_s"] == s["median_s"]
        assert s["max_s"] == pytest.approx(1.5 * s["min_s"], rel=1e-3)


@pytest.mark.slow
def test_ray_import_gives_the_same_job_as_the_pool(pod: list[Path], pool_run: Path, tmp_path: Path) -> None:
    """A local Ray cluster started for the import (about 20 s on a busy 2-core machine)."""
    proc = tpu_perf_cli("import", str(pod[0].parents[2]), "--store", str(tmp_path), "--engine", "ray", check=True)
    ray_run = Path(proc.stdout.strip())
    assert "8 hosts imported with --engine ray" in proc.stderr
    for i in range(HOSTS):
        pd.testing.assert_frame_equal(_ops(ray_run, i), _ops(pool_run, i))
        for table in ("timeline", "devices"):
            pd.testing.assert_frame_equal(pd.read_parquet(ray_run / "hosts" / str(i) / f"{table}.parquet"), pd.read_parquet(pool_run / "hosts" / str(i) / f"{table}.parquet"))
    job = json.loads((ray_run / "run.json").read_text())
    assert job["job"] and job["process_count"] == HOSTS and [p["status"] for p in job["processes"]] == ["completed"] * HOSTS
    a, b = report_doc(ray_run), report_doc(pool_run)
    assert a["ops_spread"] == b["ops_spread"] and [h["top_ops"] for h in a["hosts"]] == [h["top_ops"] for h in b["hosts"]]


def test_engine_names_are_checked_before_anything_is_read(tmp_path: Path) -> None:
    from tpu_perf.commands.import_job import parse_engine

    assert parse_engine("pool") == ("pool", None) and parse_engine("ray") == ("ray", None)
    assert parse_engine("ray=ray://head:10001") == ("ray", "ray://head:10001")
    for bad in ("dask", "pool=x", "ray="):
        with pytest.raises(UsageError, match="expected one of pool, ray, ray=ADDRESS"):
            parse_engine(bad)
    proc = tpu_perf_cli("import", str(TPU), "--store", str(tmp_path), "--engine", "spark")
    assert proc.returncode == 2 and "--engine spark" in proc.stderr and not list(tmp_path.iterdir())


def test_a_job_larger_than_the_breakdown_cap_keeps_the_first_hosts_breakdown(pool_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpu_perf.analyzers import hosts

    monkeypatch.setattr(hosts, "BREAKDOWN_ALL_HOSTS", HOSTS - 1)  # 8 processes: one over the cap
    section = hosts.analyze_hosts(load_run(pool_run))
    assert section.hosts[0].breakdown is not None and [h.breakdown for h in section.hosts[1:]] == [None] * (HOSTS - 1)
    assert "breakdowns are the first process's and the stragglers'" in section.note
    monkeypatch.setattr(hosts, "BREAKDOWN_ALL_HOSTS", HOSTS)  # at the cap: every one
    assert all(h.breakdown is not None for h in hosts.analyze_hosts(load_run(pool_run)).hosts)


def test_a_damaged_host_file_fails_the_import_naming_it_and_the_job_reads_failed(tmp_path: Path) -> None:
    files = write_pod(TPU, tmp_path / "log", hosts=3, copies=1)
    files[1].write_bytes(files[1].read_bytes()[:5000])
    proc = tpu_perf_cli("import", str(tmp_path / "log"), "--store", str(tmp_path / "runs"))
    assert proc.returncode == 3 and files[1].name in proc.stderr and "Traceback" not in proc.stderr
    [job] = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    run = load_run(job)
    assert run.status == "failed" and {h.manifest["process_index"]: h.status for h in run.hosts}[1] == "failed"
    doc = report_doc(job)
    assert [(h["status"], bool(h["top_ops"])) for h in doc["hosts"]] == [("completed", True), ("failed", False), ("completed", True)]
    assert all(s["hosts"] == 2 for s in doc["ops_spread"])  # the failed host has no op, not 0 s of each
