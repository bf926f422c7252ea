"""Real PyTorch training scripts written the way people write them record truthfully (issue 16):
forks and DataLoader workers, the script's own profiler, GANs (two optimizers per iteration) and
FLOPs of torch.compile'd steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

SCRIPTS = ROOT / "tests" / "torch_scripts" / "harden"
pytestmark = pytest.mark.slow


def report(run) -> dict:
    """The report as a dict (the one place that knows how the report is built)."""
    return build_report(run).to_dict()


def record(store: Path, *args: str) -> tuple[object, object]:
    proc = tpu_perf_cli("record", "-q", "--store", str(store), *args)
    runs = sorted(p for p in store.iterdir() if p.is_dir()) if store.exists() else []
    assert runs, proc.stderr
    return proc, load_run(str(runs[-1]))


def test_fork_and_dataloader_workers_keep_every_step(tmp_path: Path) -> None:
    proc, run = record(tmp_path / "runs", str(SCRIPTS / "fork_loader.py"), "12")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done 24"  # the forked child printed nothing
    assert run.status == "completed" and len(run.steps) == 24  # the fork happens inside the trace window
    assert len(list((tmp_path / "runs").iterdir())) == 1


@pytest.mark.parametrize("mode", ["handler", "events"])
def test_script_profiler_wins_over_the_trace_window(tmp_path: Path, mode: str) -> None:
    out = tmp_path / f"own-{mode}"
    proc, run = record(tmp_path / "runs", str(SCRIPTS / "selfprofile.py"), "12", mode, str(out))
    assert proc.returncode == 0, proc.stderr  # the script exits 7 when its own profile is empty
    assert "own profile ok True" in proc.stdout
    if mode == "events":
        assert "aten::addmm" in out.read_text().splitlines()
    assert len(run.steps) == 12  # a profiler opened mid-loop does not replace the optimizer steps
    assert [w for w in run.manifest["warnings"] if "profiles itself" in w] != []
    assert list(Path(run.url, "trace").glob("*.script.pt.trace.json"))
    assert not run.table("ops").empty  # with a handler: the file it wrote, copied (Kineto saves a trace once)


def test_gan_iteration_is_one_step(tmp_path: Path) -> None:
    out = tmp_path / "gan.json"
    proc, run = record(tmp_path / "runs", str(SCRIPTS / "gan.py"), "12", str(out))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    doc = report(run)
    assert len(run.steps) == truth["iterations"] == 12
    assert run.manifest["torch"]["optimizer_steps"] == 24
    assert run.manifest["torch"]["optimizers_per_step"] == ["Adam", "Adam"]
    assert any("2 optimizers step in each loop iteration" in w for w in doc["run"]["warnings"])
    assert doc["flops"]["per_step"] == pytest.approx(truth["flops_per_iteration"], rel=1e-9)


def test_compiled_model_flops_equal_the_eager_count(tmp_path: Path) -> None:
    out = tmp_path / "compiled.json"
    proc, run = record(tmp_path / "runs", str(SCRIPTS / "compiled_mlp.py"), "8", str(out))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    doc = report(run)
    assert doc["flops"]["per_step"] == pytest.approx(truth["eager_flops"], rel=0.05)
    assert bool(run.programs["counted_eager"].iloc[0])
    assert doc["compile"]["torch"]["recompiles"] == 0  # the eagerly counted step compiled nothing
    assert len(run.steps) == truth["iterations"] + 1  # + the script's own eager step at the end


def test_eval_and_checkpoint_steps_are_flagged_and_left_out(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    proc, run = record(tmp_path / "runs", "--no-trace", str(SCRIPTS / "eval_ckpt.py"), "20", "5", str(out), str(tmp_path / "ckpt.pt"))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    doc = report(run)
    assert len(run.steps) == truth["iterations"]
    assert run.steps.loc[run.steps["interleaved"], "step"].tolist() == truth["interleaved_steps"]
    assert doc["steps"]["interleaved"] == len(truth["interleaved_steps"]) == 3
    flagged = set(truth["interleaved_steps"])
    steady = doc["steps"]["steady"]
    assert steady == sum(1 for s in run.steps.itertuples() if s.step >= doc["steps"]["warmup"] and not (s.traced or s.instrumented or s.compiled or s.step in flagged))
