"""Step time is the iteration: real loops with host work between step calls, JAX and PyTorch.

Each script times its own iterations with a wall clock; tpu-perf's steps must agree with that
clock, tile the loop (each step starts where the previous ended), and keep the device view beside.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import DATA, ROOT, tpu_perf_cli
from invariants import check_run

from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

pytestmark = pytest.mark.serial  # times measured against each other: `make test` runs this module alone, after the parallel part

HOST_MS = 50.0


def _record(store: Path, script: Path, out: Path, *args: str) -> tuple[object, dict, dict]:
    proc = tpu_perf_cli("record", "-q", "--store", str(store), "--no-trace", str(script), str(out), *args)
    assert proc.returncode == 0, proc.stderr
    run = load_run(next(store.iterdir()))
    return run, check_run(run), json.loads(out.read_text())


@pytest.fixture(scope="module")
def jax_hostwork(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict, dict]:
    tmp = tmp_path_factory.mktemp("jax_hostwork")
    return _record(tmp / "runs", ROOT / "tests/scripts/jax_hostwork.py", tmp / "self.json", "--steps", "24", "--host-ms", str(HOST_MS))


@pytest.fixture(scope="module")
def torch_hostwork(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict, dict]:
    tmp = tmp_path_factory.mktemp("torch_hostwork")
    return _record(tmp / "runs", ROOT / "tests/torch_scripts/hostwork.py", tmp / "self.json", "--steps", "24", "--host-ms", str(HOST_MS))


def _tiles(steps) -> bool:
    return bool((steps["end_time_s"].iloc[:-1].to_numpy() == steps["start_time_s"].iloc[1:].to_numpy()).all())


@pytest.mark.slow
def test_jax_host_work_and_float_loss_are_in_the_step(jax_hostwork) -> None:
    run, doc, own = jax_hostwork
    s = doc["steps"]
    loop = statistics.median(own["iteration_s"][1:])
    assert loop > HOST_MS / 1e3  # the script's own clock: at least the host work per iteration
    assert s["count"] == own["steps"] == 24
    assert s["iteration_median_s"] == pytest.approx(loop, rel=0.05)
    assert s["steps_per_s"] == pytest.approx(1 / loop, rel=0.05)
    # The device view: the update itself is a few ms at most, the rest of the iteration is host time.
    assert s["device_median_s"] < 0.25 * s["iteration_median_s"]
    assert s["host_median_s"] == pytest.approx(s["iteration_median_s"] - s["device_median_s"], rel=0.1)
    # The host split: the input work is the loop's own (outside the step call and its waits), the
    # call is dispatch; float(loss) is a wait, neither.
    assert 0.95 * HOST_MS / 1e3 <= s["loop_median_s"] <= s["iteration_median_s"] and s["call_median_s"] < 0.1 * s["iteration_median_s"]
    assert _tiles(run.steps)


@pytest.mark.slow
@pytest.mark.parametrize("sync, mark", [("none", "auto"), ("device_get", "auto"), ("print", "annotation"), ("float", "explicit")])
def test_every_loop_shape_reports_its_iteration(tmp_path: Path, sync: str, mark: str) -> None:
    """No sync, a fetch of a metrics dict, printing a device value; automatic, annotated or
    explicitly marked steps: the median step is the loop's own median iteration."""
    _, doc, own = _record(tmp_path / "runs", ROOT / "tests/scripts/jax_hostwork.py", tmp_path / "self.json", "--steps", "14", "--host-ms", "30", "--sync", sync, "--mark", mark)
    s = doc["steps"]
    assert s["count"] == 14
    assert s["iteration_median_s"] == pytest.approx(statistics.median(own["iteration_s"][1:]), rel=0.05)
    # device time is known for every loop shape, a loop that never syncs included (its outputs are
    # watched), and is small against 30 ms of host input work per step
    assert s["device_median_s"] is not None and s["device_median_s"] < 0.25 * s["iteration_median_s"]
    assert s["host_median_s"] == pytest.approx(s["iteration_median_s"] - s["device_median_s"], rel=0.1)


@pytest.mark.slow
def test_jax_steps_sum_to_the_loop_wall_time(jax_hostwork) -> None:
    run, _, own = jax_hostwork
    steps = run.steps.iloc[:-1]  # the script's clock has no end for its last iteration
    assert steps["duration_s"].sum() == pytest.approx(sum(own["iteration_s"]), rel=0.02)
    device = run.steps["device_s"].dropna()  # a step whose end tpu-perf did not see happen is unknown, not 0
    assert len(device) >= len(run.steps) - 3 and (device <= run.steps.loc[device.index, "duration_s"] + 1e-9).all()


@pytest.mark.slow
def test_torch_host_work_and_item_are_in_the_step(torch_hostwork) -> None:
    run, doc, own = torch_hostwork
    s = doc["steps"]
    loop = statistics.median(own["iteration_s"][1:])
    assert s["count"] == 24
    assert s["iteration_median_s"] == pytest.approx(loop, rel=0.05)
    assert s["device_median_s"] is None and s["host_median_s"] is None  # PyTorch's device view is unknown here
    assert s["loop_median_s"] is None and s["call_median_s"] is None  # no jitted calls to time
    assert s["device_reason"] == "PyTorch's device time per step is not measured"
    assert _tiles(run.steps)


@pytest.mark.slow
def test_report_shows_the_iteration_and_the_device_view(jax_hostwork) -> None:
    run, doc, _ = jax_hostwork
    text = tpu_perf_cli("report", run.url, env={"COLUMNS": "160"}, check=True).stdout
    assert "device" in text and "host" in text
    assert f"{doc['steps']['iteration_median_s'] * 1e3:.2f} ms" in text


def test_imported_steps_tile_from_the_trace_markers(store: Path) -> None:
    proc = tpu_perf_cli("import", "--store", str(store), str(DATA / "mi250_minitoy_train.json.gz"), check=True)
    run = load_run(proc.stdout.strip())
    steps, markers = run.steps, run.table("device_steps").sort_values("start_s")
    assert len(steps) == len(markers) == 2 and _tiles(steps)
    assert steps["end_time_s"].iloc[0] == markers["start_s"].iloc[1]  # ends where the next marker starts
    assert steps["duration_s"].iloc[-1] == pytest.approx(markers["duration_s"].iloc[-1], rel=1e-4)  # the last: its own marker
    assert steps["device_s"].isna().all()  # host-side ProfilerStep markers say nothing of device time
    assert steps["compile_s"].isna().all()  # a trace knows no compiles
    doc = build_report(run).to_dict()
    assert doc["compile"]["count"] is None and "imported" in doc["compile"]["reason"]
