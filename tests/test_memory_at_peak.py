"""`memory.at_peak` and `aot.at_peak`: what is live at the step program's peak, by XLA's liveness.

One recording of an MLP trained with optax.adam (parameters and optimizer state donated), on 4 host
CPU devices and compiled for a v5e:2x2 slice, shared by the tests. The expected bytes are the
pytrees' own, computed here from the script's layer sizes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import ROOT, tpu_perf_cli

SCRIPT = ROOT / "tests" / "memory_scripts" / "adam_mlp.py"
SIZES = [128, 256, 256, 256, 256, 10]
PARAM_BYTES = 4 * sum(a * b + b for a, b in zip(SIZES[:-1], SIZES[1:], strict=True))
ADAM_BYTES = 2 * PARAM_BYTES + 4
"""Adam's mu and nu (float32, like the parameters) and its int32 step count."""
CATEGORIES = {"parameters", "optimizer_state", "gradients", "activations", "inputs", "temporaries", "other"}


def record(store: Path, *options: str) -> dict:
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(store), *options, str(SCRIPT), "--steps", "3", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = store.iterdir()
    return json.loads(tpu_perf_cli("report", "--json", str(run), check=True).stdout)


@pytest.fixture(scope="module")
def adam_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return record(tmp_path_factory.mktemp("adam"), "--topology", "v5e:2x2")


def assert_breakdown(at_peak: dict) -> None:
    categories = at_peak["categories"]
    assert set(categories) == CATEGORIES
    assert sum(categories.values()) == pytest.approx(at_peak["peak_bytes"], rel=0.02)
    assert categories["parameters"] == pytest.approx(PARAM_BYTES, rel=0.05)
    assert categories["optimizer_state"] == pytest.approx(ADAM_BYTES, rel=0.05)
    top = at_peak["top_buffers"]
    assert len(top) >= 10 and [b["bytes"] for b in top] == sorted((b["bytes"] for b in top), reverse=True)
    for b in top:
        assert b["category"] in CATEGORIES and b["shape"].startswith(b["dtype"] + "[") and b["source"], b
        dims = [int(d) for d in b["shape"][b["shape"].index("[") + 1 : -1].split(",") if d]
        assert b["bytes"] == 4 * math.prod(dims), b  # every buffer here is 32-bit
    paths = {b["source"].removeprefix("copy of ").removeprefix("new ") for b in top if b["category"] == "optimizer_state"}
    assert any(p.startswith("opt_state[0].mu[") for p in paths) and any(p.startswith("opt_state[0].nu[") for p in paths)
    assert len(at_peak["findings"]) == 2 and "optimizer state is" in at_peak["findings"][0]


@pytest.mark.slow
def test_adam_step_on_the_host_devices(adam_report: dict) -> None:
    at_peak = adam_report["memory"]["at_peak"]
    assert at_peak["program"] == "train_step" and "HloLiveRange" in at_peak["source"]
    assert_breakdown(at_peak)
    # ops other than arguments carry file:line from their metadata, in the script itself
    sourced = [b for b in at_peak["top_buffers"] if b["source"].startswith(str(SCRIPT))]
    assert sourced or not any(b["op_name"] and "jvp(" in b["op_name"] for b in at_peak["top_buffers"])


@pytest.mark.slow
def test_adam_step_on_a_v5e_slice(adam_report: dict) -> None:
    aot = adam_report["aot"]
    at_peak = aot["at_peak"]
    assert aot["topology"] == "v5e:2x2" and "HloLiveRange" in at_peak["source"]
    assert_breakdown(at_peak)
    assert aot["fits"] is True
    assert aot["at_peak_headroom_bytes"] == aot["hbm_capacity_bytes"] - at_peak["peak_bytes"] > 0
