"""torch-tpu on a CPU machine, in its own environment (`make test` builds .venv-torch-tpu for it).

torch-tpu 0.2.0 needs libtpu>=0.0.50 and jax 0.10.2 pins libtpu 0.0.42.*, so on Python 3.11 the two
cannot share an environment: this file runs in the torch-tpu one, every other test in the main one.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run


def test_torch_tpu_installed_without_a_tpu(tmp_path) -> None:
    """Auto-loaded torch-tpu on a CPU machine: the example trains on CPU and is recorded."""
    store = tmp_path / "runs"
    proc = tpu_perf_cli("record", "-q", "--store", str(store), "--no-trace", str(ROOT / "examples" / "torch_tpu_train.py"), "--steps", "6", env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "TORCH_TPU_TEST_SETTING": "1"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = load_run(str(next(store.iterdir())))
    assert len(run.steps) == 6 and run.manifest["hardware"]["platform"] == "cpu"
    assert "torch-tpu" in run.manifest["versions"] and run.manifest["env"]["TORCH_TPU_TEST_SETTING"] == "1"
    assert "tpu_compile_cache" not in run.manifest["torch"]  # no TPU: not asked (it would raise)


def test_cache_stats_reader_survives_torch_tpu_without_a_tpu() -> None:
    code = (
        "import torch, torch_tpu\n"
        "from tpu_perf.collectors.torch.compiles import tpu_cache_stats\n"
        "from tpu_perf.collectors.torch.device import accelerator_type\n"
        "print(tpu_cache_stats(torch) is None or isinstance(tpu_cache_stats(torch), dict), accelerator_type(torch))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["True", "None"]


def test_doctor_passes_the_torch_tpu_environment(tmp_path) -> None:
    """torch-tpu with its own libtpu and no jax: both of its pairs hold, nothing fails."""
    import importlib.metadata as md
    import json

    proc = tpu_perf_cli("doctor", "--json", "--store", str(tmp_path / "runs"), timeout=300)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 0, proc.stdout
    torch_pair, libtpu_pair = checks["torch-tpu -> torch"], checks["torch-tpu -> libtpu"]
    assert torch_pair["verdict"] == libtpu_pair["verdict"] == "ok"
    assert torch_pair["detail"].endswith(f"found torch {md.version('torch')}")
    assert libtpu_pair["detail"] == f"torch-tpu {md.version('torch-tpu')} needs libtpu>=0.0.50; found libtpu {md.version('libtpu')}"
    assert "jax -> libtpu" not in checks and checks["profiler"]["verdict"] == "skip"


def test_doctor_names_the_metadata_stall_off_gcp(tmp_path) -> None:
    """torch-tpu with libtpu, no TPU, TPU_SKIP_MDS_QUERY unset: the stall in backward() is named with its fix."""
    import json

    from tests.conftest import user_env

    env = {k: v for k, v in user_env().items() if k != "TPU_SKIP_MDS_QUERY"}
    full = {**env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", "doctor", "--json", "--no-probe", "--store", str(tmp_path / "runs")], env=full, capture_output=True, text=True, timeout=300)
    check = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["libtpu metadata"]
    assert proc.returncode == 1 and check["verdict"] == "fail" and "TPU_SKIP_MDS_QUERY=1" in check["fix"]
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", "doctor", "--json", "--no-probe", "--store", str(tmp_path / "runs")], env={**full, "TPU_SKIP_MDS_QUERY": "1"}, capture_output=True, text=True, timeout=300)
    assert {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["libtpu metadata"]["verdict"] == "ok"
