"""The exact tier: FLOPs per step and the step's optimized-HLO hash compared for every run (real
JAX recordings on CPU, no --topology), and XLA's peak memory deciding whatever the timing noise."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, tpu_perf_cli

from tpu_perf.analyzers.exact import hlo_hash, program_text
from tpu_perf.analyzers.regression import Verdict, check_sets
from tpu_perf.analyzers.run_values import RunValues

SCRIPT = str(ROOT / "tests" / "scripts" / "gate_step.py")


def test_hlo_hash_ignores_metadata_only() -> None:
    text = 'ENTRY %main { %dot = f32[4,4] dot(%a, %b), metadata={op_name="jit(step)/dot" source_file="train.py" source_line=12} }'
    moved = text.replace("source_line=12", "source_line=40")
    assert hlo_hash(text) == hlo_hash(moved)
    assert hlo_hash(text) != hlo_hash(text.replace("f32[4,4]", "f32[4,8]"))
    braces = text.replace('op_name="jit(step)/dot"', 'op_name="jit(step)/pjit[name={f}]/dot"')  # a brace inside a quoted name
    assert program_text(braces) == program_text(text) and "metadata" not in program_text(braces)


def _clone(folder: Path, edit: tuple[str, str] | None = None) -> Path:
    """gate_step.py copied into its own folder (a second clone of the repository), a line edited."""
    folder.mkdir(parents=True)
    text = (ROOT / "tests" / "scripts" / "gate_step.py").read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    (folder / "gate_step.py").write_text(text)
    return folder / "gate_step.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("exact") / "runs")
    root = tmp_path_factory.mktemp("clones")
    scripts = {
        "base": SCRIPT, "same": SCRIPT, "more": SCRIPT,  # "more": one more matmul in the loop, +25 % FLOPs
        # the same program from another clone in another folder, its lines moved by a comment:
        "clone": str(_clone(root / "ci" / "pr-17" / "checkout", ("import argparse", "# a comment-only change\n\nimport argparse"))),
        "op": str(_clone(root / "elsewhere", ("jnp.tanh(h @ w)", "jnp.sin(h @ w)"))),  # one op changed, same shapes and matmuls
    }
    for side, script in scripts.items():
        work = "5" if side == "more" else "4"
        tpu_perf_cli("record", "--store", path, "--tag", f"side={side}", "--no-trace", "-q", script, "--work", work, "--width", "64", "--steps", "20", cwd=Path(script).parent, check=True)
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
def test_same_program_from_another_clone_in_another_folder_is_the_same_program(store: str) -> None:
    """The HLO text of the two recordings holds each clone's path and moved line numbers (its
    FileNames / FileLocations tables); the program's hash does not."""
    base, clone = (_step_hlo(store, side) for side in ("base", "clone"))
    assert base != clone and "/pr-17/checkout/gate_step.py" in clone  # the raw text differs ...
    assert program_text(base) == program_text(clone)  # ... the program does not
    _, by = checks(store, "clone")
    assert by["hlo"]["verdict"] == "PASS" and by["flops_per_step"]["verdict"] == "PASS"


@pytest.mark.slow
def test_one_changed_op_changes_the_hash(store: str) -> None:
    _, by = checks(store, "op")
    assert by["hlo"]["verdict"] == "CHANGED"


def _step_hlo(store: str, side: str) -> str:
    from tpu_perf.commands.selectors import select

    (run,) = select([f"tag:side={side}"], store, flag="--candidate").runs
    row = run.programs[run.programs["is_step"].astype(bool)].iloc[0]
    return run.read_text(str(row["hlo_file"]))


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
