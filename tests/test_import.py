"""`tpu-perf import` end to end: real captures in, runs out, `report --json` on them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import DATA, report_doc, tpu_perf_cli
from tpu_perf.analyzers.report import build_report
from tpu_perf.store import list_runs, load_run


def _import(store: Path, path: Path, *extra: str) -> dict:
    proc = tpu_perf_cli("import", str(path), "--store", str(store), *extra, check=True)
    url = proc.stdout.strip().splitlines()[-1]
    return build_report(load_run(url)).to_dict()


def test_import_tpu_xplane_and_report(store: Path) -> None:
    doc = _import(store, DATA / "tpu_v6e_x4_inference.xplane.pb", "--name", "v6e")
    assert doc["run"]["status"] == "completed" and doc["run"]["name"] == "v6e"
    hw = doc["run"]["hardware"]
    assert hw["device_count"] == 4 and hw["chip"] == "tpu-v6e" and hw["peak_tflops_per_device"] == 918.0
    assert [d["id"] for d in doc["devices"]] == ["TPU:0", "TPU:1", "TPU:2", "TPU:3"]
    top = doc["ops"]["top"]
    assert top[0]["name"].startswith("copy-done") and top[0]["total_time_s"] > 18
    assert {"name", "category", "fusion_kind", "occurrences", "total_time_s", "self_time_s", "flops", "bytes_accessed", "device"} <= set(top[0])
    assert sum(doc["breakdown"].values()) == pytest.approx(1.0)
    assert doc["breakdown"]["data_movement"] > 0.5  # the capture is a host-offload stress test
    run = load_run(doc["run"]["url"])
    assert any(f.endswith(".xplane.pb") for f in run.list_files("trace"))
    per = run.table("timeline")
    assert not per.empty


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Length of a union of intervals, by sorting and merging (no sweep, no numpy)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def test_breakdown_matmul_time_is_the_union_of_matmul_ops_in_each_step(store: Path) -> None:
    from tpu_perf.analyzers.breakdown import analyze_breakdown

    doc = _import(store, DATA / "mi250_minitoy_train.json.gz")
    run = load_run(doc["run"]["url"])
    bd = analyze_breakdown(run)
    assert bd.window == "steps" and len(bd.per_step) == 2
    timeline, markers = run.table("timeline"), run.table("device_steps")
    seen = 0.0
    for row in bd.per_step.itertuples():
        marker = markers[markers["step"] == row.step].iloc[0] if "step" in markers else markers.iloc[row.step]
        lo, hi = float(marker["start_s"]), float(marker["end_s"])
        ops = timeline[(timeline["lane"] == row.lane) & (timeline["kind"] == "matmul")]
        expected = _union_s([(max(a, lo), min(b, hi)) for a, b in zip(ops["start_s"], ops["end_s"], strict=True) if b > lo and a < hi])
        assert row.matmul == pytest.approx(expected, rel=1e-9, abs=1e-12)
        seen += expected
    assert seen > 0  # the capture has matmuls inside its steps: the check is not vacuous


TORCH_SCRIPT = textwrap.dedent("""
    import sys, torch
    from torch.profiler import profile, schedule, ProfilerActivity, tensorboard_trace_handler
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as prof:
        for _ in range(6):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            prof.step()
""")


@pytest.mark.slow
def test_import_pytorch_cpu_trace_made_here(store: Path, tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(TORCH_SCRIPT)
    subprocess.run([sys.executable, str(tmp_path / "t.py"), str(tmp_path / "tb")], check=True, capture_output=True, timeout=120)
    doc = _import(store, tmp_path / "tb")
    assert doc["run"]["frameworks"] == ["pytorch"]
    assert doc["steps"]["count"] == 3 and doc["device_steps"]["count"] == 3
    names = {o["name"] for o in doc["ops"]["top"]}
    assert names & {"aten::addmm", "aten::linear", "aten::mm", "Optimizer.step#SGD.step"}


def test_import_a100_reports_json(store: Path) -> None:
    doc = _import(store, DATA / "a100_alexnet.json.gz")
    out = report_doc(doc["run"]["id"], store)
    assert out["devices"][0]["kind"] == "NVIDIA A100-PG509-200" and out["devices"][0]["peak_tflops"] == 312.0
    assert out["ops"]["top"][0]["device"] == "rank0/GPU:0"
    text = tpu_perf_cli("report", doc["run"]["id"], "--store", str(store), check=True).stdout
    assert "Top ops by device time" in text and "breakdown" in text


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00garbage", b'{"traceEvents": [{"ph": "X"'])
def test_import_bad_file_one_line_error_no_run(store: Path, tmp_path: Path, content: bytes) -> None:
    good = _import(store, DATA / "cpu_only_rank34.pt.trace.json.gz")
    bad = tmp_path / "broken.json.gz" if content.startswith(b"\x1f\x8b") else tmp_path / "broken.json"
    bad.write_bytes(content)
    proc = tpu_perf_cli("import", str(bad), "--store", str(store), env={"COLUMNS": "1000"})
    assert proc.returncode == 3, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("tpu-perf")]
    assert len(lines) == 1 and str(bad.name) in lines[0] and "Traceback" not in proc.stderr
    assert [r.id for r in list_runs(str(store))] == [good["run"]["id"]]  # nothing else lost or added
    assert bad.read_bytes() == content


def test_import_missing_path_is_usage_error(store: Path, tmp_path: Path) -> None:
    proc = tpu_perf_cli("import", str(tmp_path / "nope"), "--store", str(store))
    assert proc.returncode == 2 and "nope" in proc.stderr


@pytest.mark.slow
def test_record_writes_op_tables_from_its_trace_window(store: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        @jax.jit
        def step(w, x):
            return w - 0.1 * jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) @ w.T) ** 2))(w)
        w, x = jnp.ones((128, 128)), jnp.ones((64, 128))
        for i in range(8):
            w = step(w, x)
        print(float(w.sum()))
    """))
    tpu_perf_cli("record", "--store", str(store), "-q", str(script), check=True)
    (run,) = list_runs(str(store))
    doc = build_report(run).to_dict()
    assert doc["ops"]["count"] > 0 and doc["ops"]["top"][0]["device"] == "CPU:0"
    assert "matmul" in {o["op_class"] for o in doc["ops"]["top"]}
    assert sum(doc["breakdown"].values()) == pytest.approx(1.0)
    assert not doc["run"]["warnings"]
    hlo = doc["hlo"]["analysis"]
    assert hlo["dots"] >= 2 and sum(hlo["dot_flops_share_by_dtype"].values()) == pytest.approx(1.0)
