"""`memory.at_peak` and `aot.at_peak`: what is live at the step program's peak, by XLA's liveness.

One recording of an MLP trained with optax.adam (parameters and optimizer state donated), on 4 host
CPU devices and compiled for a v5e:2x2 slice, shared by the tests. The expected bytes are the
pytrees' own, computed here from the script's layer sizes.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, html_rows, report_doc, tpu_perf_cli, tpu_perf_clis

from tpu_perf.analyzers.at_peak import GAP

SCRIPT = ROOT / "tests" / "memory_scripts" / "adam_mlp.py"
SIZES = [128, 256, 256, 256, 256, 10]
PARAM_BYTES = 4 * sum(a * b + b for a, b in zip(SIZES[:-1], SIZES[1:], strict=True))
ADAM_BYTES = 2 * PARAM_BYTES + 4
"""Adam's mu and nu (float32, like the parameters) and its int32 step count."""
CATEGORIES = {"parameters", "optimizer_state", "kv_cache", "gradients", "activations", "inputs", "temporaries", "other"}


@pytest.fixture(scope="module")
def adam_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("adam")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(store), "--topology", "v5e:2x2", str(SCRIPT), "--steps", "3", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return store


@pytest.fixture(scope="module")
def adam_report(adam_store: Path) -> dict:
    (run,) = adam_store.iterdir()
    return report_doc(run)


def assert_breakdown(at_peak: dict) -> None:
    categories = at_peak["categories"]
    assert set(categories) == CATEGORIES
    assert sum(categories.values()) == pytest.approx(at_peak["peak_bytes"], rel=0.02)
    assert categories["parameters"] == pytest.approx(PARAM_BYTES, rel=0.02)
    assert categories["optimizer_state"] == pytest.approx(ADAM_BYTES, rel=0.02)
    top = at_peak["top_buffers"]
    assert len(top) >= 10 and [b["bytes"] for b in top] == sorted((b["bytes"] for b in top), reverse=True)
    for b in (b for b in top if b["source"] != GAP):  # the gap row is space, not a value
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


@pytest.mark.slow
def test_out_of_memory_leaves_a_failed_run_that_names_what_filled_memory(tmp_path: Path) -> None:
    # the batch 2**23 times over inside the step: XLA's CPU runtime cannot allocate its temporaries
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path), str(SCRIPT), "--steps", "2", "--repeat", str(2**23), env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode != 0
    (run,) = tmp_path.iterdir()
    doc = report_doc(run)
    assert doc["run"]["status"] == "failed"
    oom, at_peak = doc["memory"]["out_of_memory"], doc["memory"]["at_peak"]
    assert oom["function"] == at_peak["program"] == "train_step" and "Out of memory" in oom["message"]
    # the failed allocation is the step's buffers at the peak (XLA's CPU runtime asks for them at once)
    assert oom["failed_allocation_bytes"] == pytest.approx(at_peak["peak_bytes"], rel=0.02)
    assert at_peak["categories"]["activations"] > 0.8 * at_peak["peak_bytes"]
    assert re.match(r"activations is (9\d|100) %", at_peak["findings"][0]) and "rematerialise" in at_peak["findings"][0]
    assert at_peak["top_buffers"][0]["shape"] == f"f32[{64 * 2**23},256]" and at_peak["top_buffers"][0]["source"].startswith(f"{SCRIPT}:")
    text = tpu_perf_cli("report", str(run), check=True).stdout
    assert "out of device memory" in text and "activations" in text
    advice = tpu_perf_cli("advise", str(run)).stdout
    assert "hbm-pressure" in advice and "ran out of device memory in train_step" in advice and re.search(r"activations is (9\d|100) %", advice)


@pytest.mark.slow
def test_pytorch_parameters_gradients_and_optimizer_state_from_the_tensors(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path), str(ROOT / "tests" / "memory_scripts" / "torch_adam.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    state = report_doc(run)["memory"]["torch_state"]
    params = 4 * (64 * 128 + 128 + 128 * 10 + 10)
    assert state["parameters_bytes"] == params and state["gradients_bytes"] == params
    assert state["optimizer_state_bytes"] == pytest.approx(2 * params, rel=0.05)  # exp_avg, exp_avg_sq (+ step counts)
    assert state["optimizers"] == ["Adam"] and state["device"] == "cpu"
    assert state["device_peak_bytes"] is None and state["remainder_bytes"] is None  # a CPU reports no device peak
    # had it died of CUDA's OOM, hbm-pressure would name these bytes
    import dataclasses

    from tpu_perf import load_run
    from tpu_perf.advise.memory import hbm_pressure
    from tpu_perf.advise.signals import build_signals

    oom = {"function": None, "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB", "failed_allocation_bytes": 20 * 2**30}
    finding = hbm_pressure(dataclasses.replace(build_signals(load_run(str(run))), out_of_memory=oom))
    assert finding.outcome == "fired" and f"Parameters {params / 2**30:.2f} GiB" in finding.reason and "(Adam)" in finding.reason


@pytest.mark.slow
def test_a_step_too_big_for_a_v5e_chip_says_what_fills_it_and_sharding_makes_it_fit() -> None:
    # 1.9 B float32 parameters with adam, from abstract shapes: the TPU compiler refuses it for one chip
    def aot(*options: str) -> dict:
        env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "memory_scripts" / "aot_fit.py"), *options], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip(), proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    params = 4 * (128 * 16384 + 7 * 16384**2 + 16384 * 10 + 8 * 16384 + 10)
    whole, sharded = aot(), aot("--shard")
    assert whole["fits"] is False and "RESOURCE_EXHAUSTED" in whole["out_of_memory"]
    assert whole["at_peak_headroom_bytes"] < 0 and whole["at_peak"]["peak_bytes"] > 16 * 2**30
    # the breakdown of the program it tried adds up to the HBM the compiler said it needed ("21.14G": GiB)
    required = float(re.search(r"required for HLO temporaries \(([\d.]+)G\)", whole["out_of_memory"]).group(1)) * 2**30
    assert sum(whole["at_peak"]["categories"].values()) == whole["at_peak"]["peak_bytes"] == pytest.approx(required, rel=0.01)
    available = float(re.search(r"available HBM \(([\d.]+)G\)", whole["out_of_memory"]).group(1)) * 2**30
    assert whole["at_peak_headroom_bytes"] == pytest.approx(available - whole["at_peak"]["peak_bytes"], abs=2**20)
    assert not any(re.search(r" is 0 % of the peak", f) for f in whole["at_peak"]["findings"])
    assert whole["at_peak"]["categories"]["parameters"] == pytest.approx(params, rel=0.05)
    assert whole["at_peak"]["categories"]["optimizer_state"] == pytest.approx(2 * params, rel=0.05)
    assert whole["at_peak"]["findings"][0].startswith("optimizer state is 6")
    assert sharded["fits"] is True and sharded["at_peak_headroom_bytes"] > 0
    assert sharded["at_peak"]["categories"]["parameters"] == pytest.approx(params / 4, rel=0.05)
    assert sharded["at_peak"]["categories"]["optimizer_state"] == pytest.approx(2 * params / 4, rel=0.05)


@pytest.mark.slow
def test_the_run_page_memory_tab_shows_the_breakdown(adam_store: Path, adam_report: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    from tpu_perf.views import format as fmt

    monkeypatch.setenv("TPU_PERF_STORE", str(adam_store))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_string("from tpu_perf.dashboard.screens import run\nrun.render()\n", default_timeout=60)
    at.query_params["run"] = adam_report["run"]["id"]
    at.run()
    at.session_state["run_tab"] = "Memory"  # the run page builds only the open tab
    at.run()
    assert not at.exception
    tables = [html_rows(h.proto.body) for h in at.get("html") if "Largest buffers" in h.proto.body]
    assert len(tables) == 2  # the step on the host devices, and on the v5e slice
    for table, at_peak in zip(tables, (adam_report["memory"]["at_peak"], adam_report["aot"]["at_peak"]), strict=True):
        assert [row["bytes"] for row in table] == [fmt.bytes_(b["bytes"]) for b in at_peak["top_buffers"]]
        assert [row["source"] for row in table] == [b["source"] for b in at_peak["top_buffers"]]
    bars = [h.proto.body for h in at.get("html") if 'class="tp-bars"' in h.proto.body]  # one stacked bar each (HTML)
    assert len(bars) == 2
    for drawn, at_peak in zip(bars, (adam_report["memory"]["at_peak"], adam_report["aot"]["at_peak"]), strict=True):
        for name, size in at_peak["categories"].items():  # each category's bytes on hover
            assert (f'title="{name.replace("_", " ")}: {fmt.bytes_(size)}"' in drawn) == bool(size), name
    from tpu_perf.dashboard.at_peak import compare_frame

    side = compare_frame({"a": adam_report, "b": {"memory": {"at_peak": None}}}).set_index("at the peak")
    at_peak = adam_report["memory"]["at_peak"]
    assert side.loc["optimizer state", "a"] == fmt.bytes_(at_peak["categories"]["optimizer_state"]) and side.loc["peak", "b"] == "n/a"


@pytest.mark.slow
def test_sgd_momentum_with_remat(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path), str(SCRIPT), "--steps", "3", "--optimizer", "momentum", "--remat", env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    at_peak = report_doc(run)["memory"]["at_peak"]
    assert sum(at_peak["categories"].values()) == pytest.approx(at_peak["peak_bytes"], rel=0.02)
    assert at_peak["categories"]["parameters"] == pytest.approx(PARAM_BYTES, rel=0.05)
    assert at_peak["categories"]["optimizer_state"] == pytest.approx(PARAM_BYTES, rel=0.05)  # one momentum per parameter
    assert all(b["shape"] and b["source"] for b in at_peak["top_buffers"])


def test_the_failed_allocation_is_read_from_each_runtime_message() -> None:
    from tpu_perf.analyzers.out_of_memory import failed_allocation

    assert failed_allocation("JaxRuntimeError: INTERNAL: Error dispatching computation: Out of memory allocating 6938519928900 bytes.") == 6938519928900
    assert failed_allocation("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 15.77 GiB") == 20 * 2**30
    assert failed_allocation("RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 1.50G. That was not possible.") == int(1.5 * 2**30)
    assert failed_allocation("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (21.14G) exceeds available HBM (15.75G).") is None


@pytest.mark.slow
def test_a_flax_train_state_is_named_as_state_and_its_undonated_copy_as_the_fix(tmp_path: Path) -> None:
    """flax's TrainState.create starts the step count as a Python 0: the new state still reads as
    the state (was "other", half the peak) and its second copy, not donated, as the temporaries
    donation removes (was advice to shrink the batch). Donated, the values inside the scan's loop
    body read by what computes them (were "other" of shape "?", a fifth of the peak)."""
    script = str(ROOT / "tests" / "memory_scripts" / "flax_scan_state.py")
    sides = {"kept": (), "donated": ("--donate",)}
    procs = tpu_perf_clis(*(("record", "-q", "--no-trace", "--store", str(tmp_path / side), script, str(tmp_path / f"{side}.json"), *extra) for side, extra in sides.items()),
                          env={"JAX_PLATFORMS": "cpu"})
    assert all(p.returncode == 0 for p in procs), [p.stderr[-3000:] for p in procs]
    peaks = {side: report_doc(next((tmp_path / side).iterdir()))["memory"]["at_peak"] for side in sides}
    params = json.loads((tmp_path / "kept.json").read_text())["param_bytes"]
    for at_peak in peaks.values():
        categories = at_peak["categories"]
        assert sum(categories.values()) == pytest.approx(at_peak["peak_bytes"], rel=0.02)
        assert categories["other"] - at_peak["unused_temp_bytes"] < 1024, categories  # the rest is space between values in XLA's temporaries
        assert categories["parameters"] == pytest.approx(params, rel=0.05) and categories["optimizer_state"] == pytest.approx(2 * params, rel=0.05)
        assert all(b["shape"] != "?" and b["category"] != "other" for b in at_peak["top_buffers"] if b["source"] != GAP)
    kept, donated = peaks["kept"], peaks["donated"]
    copies = [b for b in kept["top_buffers"] if (b["source"] or "").endswith("(a second copy of the leaf, live at the peak)")]
    assert copies and all(b["category"] == "temporaries" and b["source"].startswith("new ") for b in copies)  # the argument stays the state
    said = next(f for f in kept["findings"] if f.startswith("temporaries is"))
    assert "second copies of train-state leaves" in said and "no-donation" in said and "smaller batch" not in said
    assert donated["peak_bytes"] < kept["peak_bytes"] - params  # the second copies are gone (the peak moves into the backward pass)
    assert any("/while" in (b["op_name"] or "") and b["category"] == "activations" for b in donated["top_buffers"])


def test_activations_of_a_rematerialised_step_are_not_told_to_rematerialise() -> None:
    """A program whose op names show jax.checkpoint (or a flax nn.remat module) is told to save
    less or shrink the batch, not to rematerialise."""
    import jax
    import jax.numpy as jnp

    from tpu_perf.analyzers.at_peak import _REMAT, PeakBuffer, _findings

    remat = jax.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    text = jax.jit(jax.grad(lambda x: remat(x).sum())).lower(jnp.ones(4)).compile().as_text()
    plain = jax.jit(jax.grad(lambda x: jnp.sin(jnp.sin(x)).sum())).lower(jnp.ones(4)).compile().as_text()
    assert _REMAT.search(text) and not _REMAT.search(plain)
    assert _REMAT.search('op_name="jit(step)/jvp(Model)/while/body/closed_call/ScanCheckpointBlock_0/Dense_0/dot_general"')
    buffers = [PeakBuffer(bytes=900, category="activations", shape="f32[225]", dtype="f32", op="fusion", op_name=None, source=None)]
    categories = {"activations": 900, "temporaries": 100}
    assert "rematerialise (jax.checkpoint" in _findings(categories, 1000, buffers)[0]
    said = _findings(categories, 1000, buffers, rematerialised=True)[0]
    assert "already rematerialises" in said and "jax.checkpoint_policies" in said
