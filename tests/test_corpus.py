"""A real-framework corpus (issue 24): one training script per library, written the way its users
write it, each printing its own truth (iterations, optimizer updates, per-update wall time, FLOPs
from XLA's cost analysis or FlopCounterMode). The recording must match: exact counts, time and
FLOPs within 10 %. A step is an optimizer update in every framework."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

CORPUS = ROOT / "tests" / "corpus"
pytestmark = pytest.mark.slow

TWO_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}


def record_corpus(script: str, tmp: Path, env: dict[str, str] | None = None) -> tuple[dict, dict, object]:
    """(the script's truth, the report as a dict, the run) for one corpus script."""
    truth_file = tmp / f"{script}.truth.json"
    store = tmp / script
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(store), str(CORPUS / f"{script}.py"), cwd=CORPUS, env={**TWO_CPU_DEVICES, "CORPUS_TRUTH": str(truth_file), **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = load_run(str(next(p for p in store.iterdir() if p.is_dir())))
    return json.loads(truth_file.read_text()), build_report(run).to_dict(), run


def within(measured: float | None, truth: float, rel: float = 0.10) -> bool:
    return measured is not None and abs(measured - truth) <= rel * truth


def check(truth: dict, doc: dict) -> None:
    steps = doc["steps"]
    assert steps["count"] == truth["updates"], steps
    assert (steps["micro_batches"] or 1) == truth["micro_batches"], steps  # null: no accumulation seen
    assert within(steps["median_s"], truth["step_s"]), (steps["median_s"], truth["step_s"])
    assert within(doc["flops"]["per_step"], truth["flops"]), (doc["flops"]["per_step"], truth["flops"])


@pytest.mark.parametrize("script", ["jax_pmap", "jax_aot"])
def test_jax_steps_the_detector_used_to_miss(tmp_path: Path, script: str) -> None:
    """jax.pmap (2 CPU devices; XLA's cost analysis is per device, scaled to both) and an
    ahead-of-time compiled step are steps, with the whole step's FLOPs."""
    truth, doc, _ = record_corpus(script, tmp_path)
    check(truth, doc)
    assert doc["flops"]["devices"] == (2 if script == "jax_pmap" else 1)


def test_optax_multisteps_counts_updates(tmp_path: Path) -> None:
    """flax TrainState + optax.MultiSteps(k=4), 80 calls: 20 steps of 4 micro-batches, an update's
    FLOPs (4 micro-batches' forward and backward and one adam update; the truth is XLA's cost
    analysis of those, each compiled alone)."""
    truth, doc, run = record_corpus("flax_multisteps", tmp_path)
    check(truth, doc)
    assert doc["steps"]["micro_batches"] == 4
    assert run.manifest["accumulation"]["by"] == "optax.MultiSteps"
