"""Model-FLOPs MFU in recorded runs: real recordings of examples/jax_mlp.py on CPU.

The model named at record time need not be the script's (a CPU cannot train Llama): the report
must apply the named convention to the stored shapes, the measured tokens/s and the chosen peak.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, tpu_perf_cli, tpu_perf_clis

from tpu_perf.analyzers.report import build_report
from tpu_perf.modelflops.arch import Architecture
from tpu_perf.modelflops.conventions import CONVENTIONS, DEFAULT_CONVENTION
from tpu_perf.store import load_run

pytestmark = pytest.mark.slow
TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128}
TOKENS = 2048


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("mfu")
    store = str(base / "runs")
    config = base / "config.json"
    config.write_text(json.dumps(TINY))
    script = str(ROOT / "examples" / "jax_mlp.py")
    tpu_perf_cli("calibrate", "--store", store, "--save", "--size", "128", check=True)  # alone: it times matmuls
    # the two recordings at once, after the calibration ("plain" records it); no test compares their times
    procs = tpu_perf_clis(["record", "--store", store, "--name", "ironwood", "--hf-config", str(config), "--chip", "ironwood", "--tokens-per-step", str(TOKENS), "--no-trace", "-q", script, "--steps", "15"],
                          ["record", "--store", store, "--name", "plain", "--no-trace", "-q", script, "--steps", "15"])
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    config.unlink()  # the runs must be self-contained: no report may need the file any more
    return {"store": store, "config": config, "ironwood": load_run("ironwood", store=store), "plain": load_run("plain", store=store)}


def test_model_mfu_from_stored_hf_config_per_device_and_per_chip(runs: dict) -> None:
    run = runs["ironwood"]
    stored = run.manifest["config"]["architecture"]
    assert stored["layers"] == 2 and stored["kv_heads"] == 2  # parsed at record time: the run is self-contained
    assert not runs["config"].exists()  # removed after recording: the report reads the run alone
    doc = build_report(run).to_dict()
    d = doc["mfu_detail"]
    assert doc["mfu_basis"] == "model_flops" and d["convention"] == DEFAULT_CONVENTION
    fpt = CONVENTIONS[DEFAULT_CONVENTION].fn(Architecture.from_dict(stored)).flops_per_token
    assert d["flops_per_token"] == pytest.approx(fpt)
    tokens_per_s = TOKENS / doc["steps"]["step_s"]
    assert d["tokens_per_s"] == pytest.approx(tokens_per_s)
    # one CPU device recorded as an Ironwood device: 2 devices per chip, half a chip, half the chip's peak per device
    assert d["devices"] == 1 and d["devices_per_chip"] == 2 and d["chips"] == 0.5
    assert d["peak_tflops_per_chip"] == 2307 and d["peak_tflops_per_device"] == pytest.approx(1153.5) and d["peak_source"] == "catalogue"
    assert d["tflops_per_device"] == pytest.approx(fpt * tokens_per_s / 1e12)
    assert d["tflops_per_chip"] == pytest.approx(2 * d["tflops_per_device"])
    assert doc["mfu"] == d["mfu_per_device"] == d["mfu_per_chip"] == pytest.approx(d["tflops_per_device"] / 1153.5)
    f = doc["flops"]
    assert f["source"] == "xla_cost_analysis" and d["hardware_utilization"] == f["utilization"]
    assert f["utilization"] == pytest.approx(f["achieved_tflops_per_device"] / 1153.5)
    assert f["achieved_tflops_per_chip"] == pytest.approx(2 * f["achieved_tflops_per_device"])


def test_report_renders_both_utilisations(runs: dict) -> None:
    proc = tpu_perf_cli("report", "--store", runs["store"], "ironwood", check=True, env={"COLUMNS": "250"})
    assert "hardware FLOPs" in proc.stdout and "model MFU" in proc.stdout and "maxtext convention" in proc.stdout
    assert "per chip (2 device(s)/chip)" in proc.stdout


def test_unknown_model_keeps_hardware_mfu_with_a_measured_cpu_peak(runs: dict) -> None:
    doc = build_report(runs["plain"]).to_dict()
    cal = json.loads((Path(runs["store"]) / "calibration.json").read_text())["cpu"]
    assert runs["plain"].manifest["config"]["calibration"]["cpu"]["tflops"] == cal["tflops"]
    f = doc["flops"]
    assert f["chip"] == "cpu" and f["peak_source"] == "measured" and f["peak_tflops_per_device"] == cal["tflops"]["bf16"]
    assert doc["mfu_basis"] == "hardware_flops" and doc["mfu"] == f["utilization"] == pytest.approx(f["achieved_tflops_per_device"] / cal["tflops"]["bf16"])
    assert doc["mfu_detail"]["mfu_per_device"] is None and "--model" in doc["mfu_detail"]["reason"]


def test_record_rejects_bad_model_before_running(tmp_path: Path) -> None:
    script = str(ROOT / "examples" / "jax_mlp.py")
    for args, flag in ((["--model", "llama9"], "--model"), (["--hf-config", str(tmp_path / "none.json")], "--hf-config")):
        proc = tpu_perf_cli("record", "--store", str(tmp_path / "runs"), *args, script, "--steps", "2", env={"COLUMNS": "400"})
        assert proc.returncode == 2 and flag in proc.stderr, proc.stderr
        assert not (tmp_path / "runs").exists()


def test_convention_chosen_at_record_time_and_overridden_at_report_time(runs: dict, tmp_path: Path) -> None:
    store = runs["store"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    script = str(ROOT / "examples" / "jax_mlp.py")
    tpu_perf_cli("record", "--store", store, "--name", "palm", "--hf-config", str(config), "--convention", "PaLM", "--chip", "v5p", "--tokens-per-step", str(TOKENS), "--no-trace", "-q", script, "--steps", "6", check=True)
    run = load_run("palm", store=store)
    arch = Architecture.from_dict(run.manifest["config"]["architecture"])
    doc = build_report(run).to_dict()
    assert doc["options"]["convention"] == "palm" == doc["mfu_detail"]["convention"]
    assert doc["mfu_detail"]["flops_per_token"] == pytest.approx(CONVENTIONS["palm"].fn(arch).flops_per_token)
    over = json.loads(tpu_perf_cli("report", "--store", store, "palm", "--json", "--convention", "maxtext-legacy", check=True).stdout)
    assert over["options"]["convention"] == "maxtext-legacy" == over["mfu_detail"]["convention"]
    assert over["mfu_detail"]["flops_per_token"] == pytest.approx(CONVENTIONS["maxtext-legacy"].fn(arch).flops_per_token)
    assert over["mfu"] == pytest.approx(doc["mfu"] * over["mfu_detail"]["flops_per_token"] / doc["mfu_detail"]["flops_per_token"])
    bad = tpu_perf_cli("report", "--store", store, "palm", "--convention", "palmm")
    assert bad.returncode == 2 and "--convention 'palmm': unknown convention; did you mean palm" in bad.stderr


def test_record_rejects_an_unknown_convention_before_running(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "--store", str(tmp_path / "runs"), "--convention", "megatron", str(ROOT / "examples" / "jax_mlp.py"))
    assert proc.returncode == 2 and "--convention 'megatron': unknown convention" in proc.stderr
    assert not (tmp_path / "runs").exists()
