"""Multi-host xplane import: each host's rows are what that host's file gives alone, in parallel or not.

Host captures are the real TPU v6e x4 capture and a copy of it 1.5x slower (every duration and
offset stretched), so the two hosts' numbers differ and can be told apart.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import DATA
from tpu_perf.errors import DataError
from tpu_perf.traces.xplane_synth import repeat_in_time, with_hostname
from tpu_perf.traces.xspace import read_xspace
from tpu_perf.traces.xspace_pool import worker_count

TPU = DATA / "tpu_v6e_x4_inference.xplane.pb"


@pytest.fixture(scope="module")
def pod(tmp_path_factory) -> list[Path]:
    session = tmp_path_factory.mktemp("log") / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    a, b = session / "vm-a.xplane.pb", session / "vm-b.xplane.pb"
    a.write_bytes(with_hostname(repeat_in_time(TPU.read_bytes(), 1), "tpu-vm-a"))
    b.write_bytes(with_hostname(repeat_in_time(TPU.read_bytes(), 1, stretch=1.5), "tpu-vm-b"))
    return [a, b]


def _host_rows(df: pd.DataFrame, col: str, host: int) -> pd.DataFrame:
    prefix = f"host{host}/"
    rows = df[df[col].astype(str).str.startswith(prefix)].copy()
    rows[col] = rows[col].str.removeprefix(prefix)
    return rows.reset_index(drop=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_each_host_rows_equal_that_file_alone(pod: list[Path], workers: int) -> None:
    both = read_xspace(pod, workers=workers)
    assert both.hostnames == ("tpu-vm-a", "tpu-vm-b")
    assert list(both.devices["id"]) == [f"host{h}/TPU:{i}" for h in (0, 1) for i in range(4)]
    for h, path in enumerate(pod):
        alone = read_xspace([path])
        key = ["device", "program", "name"]
        pd.testing.assert_frame_equal(
            _host_rows(both.ops, "device", h).sort_values(key).reset_index(drop=True),
            alone.ops.sort_values(key).reset_index(drop=True), check_dtype=False)
        pd.testing.assert_frame_equal(_host_rows(both.timeline, "lane", h), alone.timeline, check_dtype=False)
        pd.testing.assert_frame_equal(_host_rows(both.devices, "id", h), alone.devices, check_dtype=False)


def test_hosts_differ_by_their_own_numbers(pod: list[Path]) -> None:
    ops = read_xspace(pod, workers=2).ops
    per_host = ops.assign(host=ops["device"].str.split("/").str[0]).groupby("host")
    time_s, flops, occ = per_host["total_time_s"].sum(), per_host["flops"].sum(), per_host["occurrences"].sum()
    assert time_s["host1"] / time_s["host0"] == pytest.approx(1.5, rel=1e-3)  # the stretched host
    assert flops["host0"] == flops["host1"] > 1e11 and occ["host0"] == occ["host1"] == 6013
    fusion = ops[ops["name"] == "broadcast_add_fusion"].set_index("device")
    assert fusion.loc["host0/TPU:0", "bound"] == fusion.loc["host1/TPU:0", "bound"] == "memory"
    assert fusion.loc["host1/TPU:0", "arithmetic_intensity"] == fusion.loc["host0/TPU:0", "arithmetic_intensity"]


def test_repeated_capture_counts_every_copy(tmp_path: Path) -> None:
    one = read_xspace([TPU]).ops.set_index(["device", "program", "name"])
    path = tmp_path / "x3.xplane.pb"
    path.write_bytes(repeat_in_time(TPU.read_bytes(), 3))
    three = read_xspace([path]).ops.set_index(["device", "program", "name"]).loc[one.index]
    assert (three["occurrences"] == 3 * one["occurrences"]).all()
    assert three["flops"].sum() == pytest.approx(3 * one["flops"].sum())
    assert three["total_time_s"].sum() == pytest.approx(3 * one["total_time_s"].sum())


def test_hostname_falls_back_to_the_file_name(tmp_path: Path) -> None:
    (tmp_path / "worker-7.xplane.pb").write_bytes(TPU.read_bytes())
    (tmp_path / "worker-8.xplane.pb").write_bytes(TPU.read_bytes())
    t = read_xspace(sorted(tmp_path.glob("*.xplane.pb")), workers=2)
    assert t.hostnames == ("worker-7", "worker-8")


def test_damaged_host_file_names_that_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "a.xplane.pb", tmp_path / "b.xplane.pb"
    good.write_bytes(TPU.read_bytes())
    bad.write_bytes(TPU.read_bytes()[:5000])
    with pytest.raises(DataError, match="b.xplane.pb"):
        read_xspace([good, bad], workers=2)


def test_worker_count_caps_at_cores_and_memory() -> None:
    assert worker_count([100] * 16, cpus=64) == 9  # 3.5 x 9 files <= 2 x 16 files
    assert worker_count([100] * 16, cpus=4) == 4
    assert worker_count([100] * 2, cpus=64) == 1  # two hosts at 3.5x each exceed 2x their total
    assert worker_count([100] * 3, cpus=64, workers=8) == 3
    assert worker_count([1000] + [10] * 15, cpus=64) == 1  # one host holds most of the capture: one at a time


def test_import_of_a_multi_host_log_dir(pod: list[Path], tmp_path: Path) -> None:
    """A job run: one shard per host file, each that host's own tables (tests/test_import_job.py)."""
    from tests.conftest import tpu_perf_cli
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.store import load_run

    logdir = pod[0].parents[2]
    url = tpu_perf_cli("import", str(logdir), "--store", str(tmp_path / "runs"), check=True).stdout.strip().splitlines()[-1]
    run = load_run(url)
    assert run.is_job and len(run.hosts) == 2
    for host, name, path in zip(run.hosts, ["tpu-vm-a", "tpu-vm-b"], pod, strict=True):
        imported = host.manifest["imported"]
        assert imported["hostnames"] == [name] and [Path(f).name for f in imported["files"]] == [path.name] and host.manifest["host"] == name
        assert host.manifest["hardware"]["device_count"] == 4 and host.manifest["hardware"]["chip"] == "tpu-v6e"
        assert sorted(host.table("devices")["id"]) == [f"TPU:{i}" for i in range(4)]
        assert [Path(f).name for f in host.list_files("trace") if f.endswith(".xplane.pb")] == [path.name]
    alone = read_xspace(pod, workers=1).ops
    assert sum(h.table("ops")["total_time_s"].sum() for h in run.hosts) == pytest.approx(alone["total_time_s"].sum())
    doc = build_report(run).to_dict()
    assert [h["hostname"] for h in doc["hosts"]] == ["tpu-vm-a", "tpu-vm-b"] and {d["id"] for d in doc["devices"]} == {f"TPU:{i}" for i in range(4)}
    assert all(s["slowest_host"] == 1 for s in doc["ops_spread"])  # tpu-vm-b is the 1.5x stretched copy
