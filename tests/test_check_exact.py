"""The exact tier: FLOPs per step and the step's optimized-HLO hash compared for every run (real
JAX recordings on CPU, no --topology), and XLA's peak memory deciding whatever the timing noise."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import ROOT, tpu_perf_cli

from tpu_perf.analyzers.exact import hlo_hash
from tpu_perf.analyzers.regression import Verdict, check_sets
from tpu_perf.analyzers.run_values import RunValues

SCRIPT = str(ROOT / "tests" / "scripts" / "gate_step.py")


def test_hlo_hash_ignores_metadata_only() -> None:
    text = 'ENTRY %main { %dot = f32[4,4] dot(%a, %b), metadata={op_name="jit(step)/dot" source_file="train.py" source_line=12} }'
    moved = text.replace("source_line=12", "source_line=40")
    assert hlo_hash(text) == hlo_hash(moved)
    assert hlo_hash(text) != hlo_hash(text.replace("f32[4,4]", "f32[4,8]"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("exact") / "runs")
    for side, work in (("base", 4), ("same", 4), ("more", 5)):  # one more matmul in the loop: +25 % FLOPs
        tpu_perf_cli("record", "--store", path, "--tag", f"side={side}", "--no-trace", "-q", SCRIPT, "--work", str(work), "--width", "64", "--steps", "20", check=True)
    return path


def checks(store: str, candidate: str) -> tuple[int, dict[str, dict]]:
    proc = tpu_perf_cli("check", "--store", store, "--baseline", "tag:side=base", "--candidate", f"tag:side={candidate}", "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, {c["metric"]: c for c in json.loads(proc.stdout)["checks"]}


@pytest.mark.slow
def test_same_program_in_another_process_has_the_same_flops_and_hash(store: str) -> None:
    _, by = checks(store, "same")
    assert by["flops_per_step"]["verdict"] == "PASS" and by["hlo"]["verdict"] == "PASS"
    assert by["flops_per_step"]["baseline_value"] == by["flops_per_step"]["candidate_value"] > 0


@pytest.mark.slow
def test_changed_program_is_named_changed_with_both_values(store: str) -> None:
    _, by = checks(store, "more")
    flops = by["flops_per_step"]
    assert flops["verdict"] == "CHANGED" and flops["candidate_value"] > flops["baseline_value"]
    assert flops["ratio"] == pytest.approx(1.25, rel=0.05)  # 5 matmuls in the loop body for 4
    assert "MFLOP ->" in flops["message"] and "not the machine's" in flops["message"]
    assert by["hlo"]["verdict"] == "CHANGED" and " -> " in by["hlo"]["message"]


def test_memory_increase_is_a_regression_under_timing_noise() -> None:
    """+30 % XLA peak memory with per-side CV ~20 % timings: exit 1, not BAD_DATA."""
    def run(i: int, step_s: float, memory: int) -> RunValues:
        return RunValues(run_id=f"r{i}", name="train", status="completed", step_s=step_s, mfu=None, tokens_per_s=None,
                         peak_memory_bytes=memory, peak_memory_source="xla_memory_analysis", compiles_after_warmup=0, steady_steps=50,
                         fingerprint={"chip": "cpu", "framework": "jax"})
    times = (0.011, 0.020, 0.013, 0.018, 0.015)  # the machine flipping between ~11 and ~20 ms
    base = [run(i, t, 1_000_000) for i, t in enumerate(times)]
    cand = [replace(r, run_id=f"c{i}", step_s=times[(i + 2) % 5], peak_memory_bytes=1_300_000) for i, r in enumerate(base)]
    result = check_sets(base, cand)
    by = {c.name: c for c in result.checks}
    assert by["step_time"].verdict == Verdict.BAD_DATA
    assert by["peak_memory"].verdict == Verdict.REGRESSION and by["peak_memory"].ratio == pytest.approx(1.3)
    assert (result.verdict, result.exit_code) == (Verdict.REGRESSION, 1)
