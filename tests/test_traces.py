"""Trace ingestion against XProf's own converters, on a real TPU capture and on traces made here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from tpu_perf.traces import xprof_tools
from tpu_perf.traces.kineto import read_kineto
from tpu_perf.traces.xspace import read_xspace

TPU = DATA / "tpu_v6e_x4_inference.xplane.pb"


@pytest.fixture(scope="module")
def tpu_tables():
    return read_xspace([TPU])


def test_tpu_top20_ops_match_xprof_hlo_stats(tpu_tables) -> None:
    rows = xprof_tools.datatable_rows(xprof_tools.tool_data([TPU], "hlo_stats"))
    assert len(rows) >= 10
    ours = tpu_tables.ops.groupby(["program", "name"]).agg(t=("total_time_s", "sum"), f=("flops", "sum"), n=("occurrences", "sum"))
    for r in sorted(rows, key=lambda r: -r["total_time"])[:20]:
        mine = ours.loc[(r["program_id"], r["hlo_op_name"])]
        xprof_s = r["total_time"] * 1e-6
        assert mine.t == pytest.approx(xprof_s, rel=0.01), r["hlo_op_name"]
        assert mine.n == r["occurrences"]
        xprof_flops = r["model_flop_rate"] * 1e9 * xprof_s  # hlo_stats gives GFLOP/s over the op's time
        assert mine.f == pytest.approx(xprof_flops, rel=0.01, abs=1.0), r["hlo_op_name"]
    assert ours["f"].max() > 1e11  # the fusions really carry FLOPs


def test_tpu_devices_from_plane_stats(tpu_tables) -> None:
    devs = tpu_tables.devices
    assert list(devs["id"]) == ["TPU:0", "TPU:1", "TPU:2", "TPU:3"]
    assert set(devs["chip"]) == {"tpu-v6e"} and set(devs["kind"]) == {"TPU v6 Lite"}
    assert set(devs["peak_tflops"]) == {918.0}
    assert devs["peak_hbm_gbps"].iloc[0] == pytest.approx(1638, rel=1e-3)
    assert set(devs["source"]) == {"trace"}


def test_tpu_ops_boundness_and_fusion_kind(tpu_tables) -> None:
    ops = tpu_tables.ops
    fusion = ops[ops["name"] == "broadcast_add_fusion"].iloc[0]
    assert fusion["fusion_kind"] == "kLoop" and fusion["category"] == "loop fusion"
    ridge = 918e12 / (1637.993152512e9)
    assert fusion["arithmetic_intensity"] < ridge and fusion["bound"] == "memory"
    assert set(ops.loc[ops["name"].str.startswith("all-reduce"), "op_class"]) == {"collective"}


JAX_SCRIPT = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp
    @jax.jit
    def step(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) @ w.T) ** 2))(w)
    w, x = jnp.ones((128, 128)), jnp.ones((64, 128))
    w = step(w, x).block_until_ready()
    jax.profiler.start_trace(sys.argv[1])
    for i in range(4):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = step(w, x).block_until_ready()
    jax.profiler.stop_trace()
""")


@pytest.fixture(scope="module")
def jax_logdir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("jaxtrace")
    (tmp / "s.py").write_text(JAX_SCRIPT)
    subprocess.run([sys.executable, str(tmp / "s.py"), str(tmp / "log")], check=True, capture_output=True, timeout=120)
    return tmp / "log"


@pytest.mark.slow
def test_cpu_jax_step_times_match_xprof_overview(jax_logdir: Path) -> None:
    xplane = next(jax_logdir.rglob("*.xplane.pb"))
    tables = read_xspace([xplane])
    steps = tables.device_steps
    assert len(steps) == 4 and list(steps["step_num"]) == [0, 1, 2, 3]
    overview = xprof_tools.tool_data([xplane], "overview_page")
    step_table = next(t for t in overview if any(c["id"] == "stepTimeMs" for c in t.get("cols", [])))
    xprof_ms = [r["stepTimeMs"] for r in xprof_tools.datatable_rows(step_table)]
    np.testing.assert_allclose(steps["duration_s"].to_numpy() * 1e3, xprof_ms, rtol=0.01)
    assert not tables.ops.empty and tables.ops["occurrences"].min() >= 4  # XLA:CPU ops, once per step
    assert "matmul" in set(tables.ops["op_class"])


def test_kineto_gpu_traces_from_other_vendors() -> None:
    a100 = read_kineto(DATA / "a100_alexnet.json.gz")
    # "NVIDIA A100-PG509-200" with 42,297,524,224 B of memory (the trace's deviceProperties): the 40 GB
    # A100 (1,555 GB/s), not the 80 GB one (2,039 GB/s) its name's "a100" alias alone would find
    assert a100.devices["chip"].tolist() == ["a100-40gb"] and a100.devices["peak_tflops"].iloc[0] == 312.0
    assert a100.devices["peak_hbm_gbps"].iloc[0] == 1555.0
    assert a100.ops["occurrences"].sum() == 79 + 16 + 3  # kernels + memcpy + memset events
    mi250 = read_kineto(DATA / "mi250_minitoy_train.json.gz")
    assert mi250.devices["kind"].iloc[0] == "AMD Radeon Graphics" and mi250.devices["chip"].isna().all()
    assert len(mi250.device_steps) == 2


def test_kineto_cpu_only_self_time() -> None:
    t = read_kineto(DATA / "cpu_only_rank34.pt.trace.json.gz")
    assert t.devices["id"].tolist() == ["rank34/CPU:0"]
    assert (t.ops["self_time_s"] <= t.ops["total_time_s"] + 1e-12).all()
    assert t.device_steps["step_num"].tolist() == [551]


@pytest.mark.parametrize("content", [b"", b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na', b"not json at all"])
def test_kineto_bad_files_name_the_file(tmp_path: Path, content: bytes) -> None:
    from tpu_perf.errors import DataError

    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(DataError, match=str(bad)):
        read_kineto(bad)


def test_truncated_xplane_names_the_file(tmp_path: Path) -> None:
    from tpu_perf.errors import DataError

    bad = tmp_path / "cut.xplane.pb"
    bad.write_bytes(TPU.read_bytes()[:5000])
    with pytest.raises(DataError, match="cut.xplane.pb"):
        read_xspace([bad])
