"""The chip catalogue: a source link for every number, lookups by alias and device kind, calibration."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest
from conftest import tpu_perf_cli

from tpu_perf.hardware import all_chips, lookup_chip, suggest_chips
from tpu_perf.hardware.calibrate import (
    calibrated_peak,
    load_calibrations,
    measure,
    save_calibration,
)

SOURCE_HOSTS = ("cloud.google.com", "nvidia.com", "docs.jax.dev")
REQUIRED = ("tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x", "v100", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "cpu")


def test_catalogue_has_every_required_chip() -> None:
    names = [c.name for c in all_chips()]
    assert set(REQUIRED) <= set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("chip", all_chips(), ids=lambda c: c.name)
def test_every_number_has_a_source_link(chip) -> None:
    numbers = {**{p: v for p, v in chip.peak_tflops.items()}, "hbm_bytes": chip.hbm_bytes, "hbm_gbps": chip.hbm_gbps, "devices_per_chip": chip.devices_per_chip}
    for key, value in numbers.items():
        if value is None:
            continue
        url = chip.sources.get(key)
        assert url, f"{chip.name}.{key} = {value} has no source"
        parsed = urlparse(url)
        assert parsed.scheme == "https" and parsed.netloc.endswith(SOURCE_HOSTS), f"{chip.name}.{key}: {url}"
    assert set(chip.sources) <= set(numbers), f"{chip.name}: a source for a number that is not there"


def test_published_peaks_match_the_docs() -> None:
    # Values read on the pages the catalogue links (FACTS.md has the same table).
    expect = {"tpu-v4": 275, "tpu-v5e": 197, "tpu-v5p": 459, "tpu-v6e": 918, "tpu7x": 2307, "a100-80gb": 312, "h100-sxm": 989, "h200": 989, "b200": 2250}
    for name, bf16 in expect.items():
        assert lookup_chip(name).peak_tflops["bf16"] == bf16
    ironwood = lookup_chip("ironwood")
    assert ironwood.devices_per_chip == 2 and ironwood.peak_tflops_per_device("bf16") == pytest.approx(1153.5)
    assert ironwood.peak_tflops["fp8"] == 4614
    assert lookup_chip("cpu").measured and not lookup_chip("cpu").peak_tflops


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # JAX device_kind strings
        ("TPU v6 lite", "tpu-v6e"), ("TPU v5 lite", "tpu-v5e"), ("TPU v5", "tpu-v5p"), ("TPU v4", "tpu-v4"),
        ("TPU v3", "tpu-v3"), ("TPU v2", "tpu-v2"), ("TPU7x", "tpu7x"), ("cpu", "cpu"),
        # torch.cuda.get_device_name()
        ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("Tesla V100-SXM2-32GB", "v100"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"),
        # aliases users type
        ("v6e", "tpu-v6e"), ("trillium", "tpu-v6e"), ("tpu7x", "tpu7x"), ("ironwood", "tpu7x"), ("h100", "h100-sxm"), ("v5p", "tpu-v5p"), ("TPU_V5_LITE", "tpu-v5e"),
    ],
)
def test_lookup_by_alias_and_device_kind(text: str, name: str) -> None:
    assert lookup_chip(text).name == name


def test_unknown_chip_gets_close_names() -> None:
    assert lookup_chip("tpu v9000") is None and lookup_chip("") is None
    assert "trillium" in suggest_chips("trilium")


def test_chips_command_lists_catalogue_with_sources() -> None:
    proc = tpu_perf_cli("chips", "--json", check=True)
    rows = json.loads(proc.stdout)
    assert {r["name"] for r in rows} >= set(REQUIRED)
    v6e = next(r for r in rows if r["name"] == "tpu-v6e")
    assert v6e["peak_tflops"]["bf16"] == 918 and v6e["sources"]["bf16"].startswith("https://cloud.google.com/tpu/docs/v6e")
    table = tpu_perf_cli("chips", check=True, env={"COLUMNS": "200"})
    assert "tpu7x" in table.stdout and "measured" in table.stdout


def test_calibration_measures_saves_and_is_found(tmp_path) -> None:
    cal = measure("jax", size=128)
    assert cal.key == "cpu" and cal.platform == "cpu" and cal.size == 128
    assert set(cal.tflops) == {"bf16", "fp32"} and all(0 < v < 50 for v in cal.tflops.values())
    store = str(tmp_path / "runs")
    assert load_calibrations(store) == {}
    path = save_calibration(cal, store)
    saved = load_calibrations(store)
    assert path.endswith("calibration.json") and saved["cpu"]["tflops"] == cal.tflops
    assert calibrated_peak(saved, "cpu", "fp32") == cal.tflops["fp32"]
    assert calibrated_peak(saved, "tpu-v6e", "bf16") is None


@pytest.mark.slow
def test_calibrate_command_json(tmp_path) -> None:
    store = tmp_path / "runs"
    proc = tpu_perf_cli("calibrate", "--store", str(store), "--save", "--size", "128", "--json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["key"] == "cpu" and doc["tflops"]["fp32"] > 0 and doc["saved_to"].endswith("calibration.json")
    assert json.loads((store / "calibration.json").read_text())["cpu"]["size"] == 128
    bad = tpu_perf_cli("calibrate", "--size", "-3", "--store", str(store))
    assert bad.returncode == 2 and "--size" in bad.stderr
