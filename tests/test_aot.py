"""`record --topology`: the recorded step compiled for a TPU slice on this CPU machine.

Each script in tests/aot_scripts trains on 4 host CPU devices and describes its own step, so
`direct_compile.py` can compile the same step for the slice with jax alone (no tpu-perf code): the
recorded `aot` numbers must equal that, and two recordings must give identical `aot` sections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, report_doc, tpu_perf_cli, tpu_perf_clis

from tpu_perf.store import load_run

SCRIPTS = ROOT / "tests" / "aot_scripts"
FOUR_CPUS = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}


def record_args(store: Path, script: str, *topologies: str, options: tuple[str, ...] = ()) -> list[str]:
    return ["record", "-q", "--no-trace", "--store", str(store), *[a for t in topologies for a in ("--topology", t)], *options, str(SCRIPTS / script)]


def last_report(store: Path) -> dict:
    """The `report --json` of the store's newest run, computed in this process ({} when none)."""
    runs = sorted(store.iterdir(), key=lambda p: p.stat().st_mtime) if store.exists() else []
    return report_doc(runs[-1]) if runs else {}


def record(store: Path, script: str, *topologies: str, env: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = tpu_perf_cli(*record_args(store, script, *topologies, options=options), env={**FOUR_CPUS, **(env or {})})
    return proc, last_report(store)


def start_direct(script: str, topology: str) -> subprocess.Popen[str]:
    """direct_compile.py, started in the background: it needs nothing from a recording, so a test
    compiles it while it records (nothing here is timed)."""
    return subprocess.Popen([sys.executable, str(SCRIPTS / "direct_compile.py"), str(SCRIPTS / script), topology], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FOUR_CPUS})


def direct(started: subprocess.Popen[str]) -> dict:
    out, err = started.communicate(timeout=300)
    assert started.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def assert_matches(aot: dict, ref: dict) -> None:
    assert aot["devices"] == ref["devices"] == 4
    assert aot["flops_per_device_step"] == pytest.approx(ref["flops"], rel=1e-3)
    assert aot["flops_per_step"] == pytest.approx(ref["flops"] * 4, rel=1e-3)
    assert aot["bytes_accessed"] == pytest.approx(ref["bytes_accessed"], rel=1e-3)
    assert aot["peak_hbm_bytes"] == pytest.approx(ref["peak_memory_in_bytes"], rel=1e-3)
    if ref["optimal_seconds"] > 0:
        assert aot["optimal_step_s"] == pytest.approx(ref["optimal_seconds"], rel=1e-3)
    else:  # v5e leaves it unset (about -1): unknown, with the reason, never a number
        assert aot["optimal_step_s"] is None and aot["roofline_mfu"] is None
        assert "left optimal_seconds unset" in aot["optimal_step_reason"] and aot["roofline_reason"] == aot["optimal_step_reason"]


@pytest.mark.slow
def test_two_slices_equal_a_direct_compile_and_repeat_exactly(tmp_path: Path) -> None:
    references = [start_direct("dp_mlp.py", t) for t in ("v6e:2x2", "v5e:2x2")]
    procs = tpu_perf_clis(*(record_args(tmp_path / side, "dp_mlp.py", "v6e:2x2", "v5e:2x2") for side in "ab"), env=FOUR_CPUS)  # the two recordings at once
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = last_report(tmp_path / "a"), last_report(tmp_path / "b")
    assert isinstance(first["aot"], list) and [a["topology"] for a in first["aot"]] == ["v6e:2x2", "v5e:2x2"]
    assert first["aot"] == second["aot"]
    v6e, v5e = first["aot"]
    assert_matches(v6e, direct(references[0]))
    assert_matches(v5e, direct(references[1]))
    # data parallel: one all-reduce of every gradient (the parameters' bytes), on each device
    params = (256 * 1024 + 1024 + 1024 * 64) * 4
    assert v6e["collectives"] == {"all-reduce": {"count": 1, "bytes": params}}
    assert v6e["chip"] == "tpu-v6e" and v6e["chips"] == 4 and v6e["hbm_capacity_bytes"] == 32_000_000_000 and v6e["fits"] is True
    assert v6e["roofline_mfu"] == pytest.approx(v6e["flops_per_step"] / (v6e["optimal_step_s"] * 918e12 * 4))
    assert v6e["fusions"] and all(k.startswith("k") for k in v6e["fusions"])
    run = load_run(first["run"]["url"])
    hlo = run.read_text(v6e["hlo_file"])
    assert "all-reduce" in hlo and ":T(" in hlo  # the TPU compiler's layouts, not the CPU program


@pytest.mark.slow
@pytest.mark.parametrize("script", ["mesh_transformer.py", "jit_shardings.py"])
def test_mesh_axes_and_jit_shardings_move_to_the_slice(tmp_path: Path, script: str) -> None:
    # the transformer's shapes as a Hugging Face config: the model-FLOPs variant of the roofline MFU
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 128, "n_head": 4, "n_inner": 512, "vocab_size": 256, "n_positions": 64}))
    options = ("--hf-config", str(config), "--tokens-per-step", str(8 * 64)) if script == "mesh_transformer.py" else ()
    reference = start_direct(script, "v6e:2x2")
    proc, doc = record(tmp_path / "runs", script, "v6e:2x2", options=options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    aot = doc["aot"]
    model_flops = doc["mfu_detail"]["model_flops_per_step"]
    if options:
        assert model_flops and aot["model_roofline_mfu"] == pytest.approx(model_flops / (aot["optimal_step_s"] * 918e12 * 4))
    else:
        assert model_flops is None and aot["model_roofline_mfu"] is None
    assert isinstance(doc["aot"], dict) and doc["aot"]["topology"] == "v6e:2x2"
    assert_matches(doc["aot"], direct(reference))
    raw = json.loads(load_run(doc["run"]["url"]).read_text("aot/v6e_2x2.json"))
    expected_axes = ["data", "model"] if script == "mesh_transformer.py" else ["batch"]
    assert raw["meshes"][0]["axis_names"] == expected_axes


@pytest.mark.slow
def test_a_device_count_that_differs_from_the_slice_is_one_line(tmp_path: Path) -> None:
    proc, doc = record(tmp_path, "jit_shardings.py", "v6e:2x4")
    assert proc.returncode == 3, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert lines == ["tpu-perf: error: --topology v6e:2x4: the slice has 8 devices but the script ran on 4 cpu device(s); run it with as many, e.g. XLA_FLAGS=--xla_force_host_platform_device_count=8 on a CPU machine"]
    assert doc["run"]["status"] == "completed" and doc["steps"]["count"] == 8 and doc["aot"] is None
    assert any("the slice has 8 devices" in w for w in doc["run"]["warnings"])


def test_a_malformed_slice_name_stops_before_the_script_runs(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "--store", str(tmp_path), "--topology", "v6e", str(SCRIPTS / "dp_mlp.py"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tpu-perf: error: --topology 'v6e': expected CHIP:SHAPE such as v6e:2x2, v5e:2x4 or v5p:2x2x1"
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.slow
def test_report_and_dashboard_show_the_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, doc = record(tmp_path, "jit_shardings.py", "v6e:2x2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = tpu_perf_cli("report", doc["run"]["url"], check=True, env={"COLUMNS": "160"}).stdout
    assert "TPU compile (record --topology)" in text and "v6e:2x2" in text and "4 x tpu-v6e" in text
    from streamlit.testing.v1 import AppTest

    from tpu_perf.views import format as fmt

    monkeypatch.setenv("TPU_PERF_STORE", str(tmp_path))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path.parent / "cache"))
    at = AppTest.from_string("from tpu_perf.dashboard.screens import run\nrun.render()\n", default_timeout=60).run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "slice" in d.value.columns)
    row = table.iloc[0]
    assert row["slice"] == "v6e:2x2" and row["FLOPs / step"] == fmt.flops(doc["aot"]["flops_per_step"])
    assert row["peak HBM / device"] == fmt.bytes_(doc["aot"]["peak_hbm_bytes"]) and row["fits"] == "yes"
