"""Real JAX training scripts written the way people write them record truthfully (issue 16):
forks, the script's own profiler, gradient accumulation, scanned layers, pjit / nnx / equinox /
bound-method steps, `-m` packages and unwritable stores."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

SCRIPTS = ROOT / "tests" / "scripts" / "harden"
pytestmark = pytest.mark.slow


def report(run) -> dict:
    """The report as a dict (the one place that knows how the report is built)."""
    return build_report(run).to_dict()


def record(store: Path, *args: str, cwd: Path | None = None, record_args: tuple[str, ...] = ()) -> tuple[object, object]:
    proc = tpu_perf_cli("record", "-q", "--store", str(store), *record_args, *args, cwd=cwd)
    runs = sorted(p for p in store.iterdir() if p.is_dir()) if store.exists() else []
    assert runs, proc.stderr
    return proc, load_run(str(runs[-1]))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("harden")


# -- forks --------------------------------------------------------------------------------------
def test_forked_children_leave_the_run_to_the_parent(tmp: Path) -> None:
    proc, run = record(tmp / "forks", str(SCRIPTS / "jax_forks.py"), "10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("done") == 1  # the child printed nothing after its sys.exit(0)
    assert run.status == "completed" and len(run.steps) == 10
    assert run.steps["step"].tolist() == list(range(10))
    assert len(list((tmp / "forks").iterdir())) == 1  # one run folder, not one per process


# -- the script's own profiler ------------------------------------------------------------------
def test_script_profiling_itself_inside_the_trace_window_keeps_its_trace(tmp: Path) -> None:
    logdir = tmp / "own-trace"
    proc, run = record(tmp / "selfprof", str(SCRIPTS / "jax_selfprofile.py"), "10", str(logdir))
    assert proc.returncode == 0, proc.stderr  # the script exits 5 if its own trace is missing
    assert "Profile has already been started" not in proc.stderr
    assert list(logdir.rglob("*.xplane.pb"))
    warnings = [w for w in run.manifest["warnings"] if "profiles itself" in w]
    assert len(warnings) == 1 and str(logdir) in warnings[0]
    assert len(run.steps) == 10
    ours = sorted(Path(run.url, "trace").rglob("*.xplane.pb"))
    assert [p.read_bytes() for p in ours] == [p.read_bytes() for p in sorted(logdir.rglob("*.xplane.pb"))]
    assert not run.table("ops").empty  # op tables from the script's trace


# -- gradient accumulation and scanned layers ---------------------------------------------------
def test_gradient_accumulation_is_one_step_per_update(tmp: Path) -> None:
    out = tmp / "accum.json"
    proc, run = record(tmp / "accum", str(SCRIPTS / "jax_accumulate.py"), "8", "4", str(out))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    assert len(run.steps) == truth["iterations"] == 8
    assert run.steps["source"].unique().tolist() == ["auto:jit(apply_updates)"]
    doc = report(run)
    expected = 4 * truth["accumulate_flops"] + truth["apply_flops"]
    assert doc["flops"]["per_step"] == pytest.approx(expected, rel=1e-9)
    assert doc["flops"]["programs_per_step"] == 2
    per_step = dict(zip(run.programs["function"], run.programs["calls_per_step"], strict=True))
    assert per_step == {"apply_updates": 1, "accumulate": 4}
    assert doc["steps"]["micro_batches"] == 4  # a hand-written loop: the micro-batch program 4 times per update


def test_scanned_layers_count_every_trip(tmp: Path) -> None:
    out = tmp / "scan.json"
    proc, run = record(tmp / "scan", str(SCRIPTS / "jax_scan.py"), "6", str(out))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    doc = report(run)
    assert len(run.steps) == 6
    assert truth["xla_flops"] < 0.3 * truth["matmul_flops"]  # what cost_analysis alone says
    assert doc["flops"]["per_step"] == pytest.approx(truth["matmul_flops"], rel=0.05)
    assert doc["flops"]["loop_extra_flops"] > 0 and doc["flops"]["unknown_trip_loops"] == 0


# -- wrappers: pjit, bound methods, nnx.jit, equinox.filter_jit -----------------------------------
@pytest.mark.parametrize("kind", ["pjit", "method", "nnx", "eqx"])
def test_wrapped_steps_are_found_and_timed_from_the_script_call(tmp: Path, kind: str) -> None:
    out = tmp / f"{kind}.json"
    proc, run = record(tmp / kind, str(SCRIPTS / "jax_wrappers.py"), kind, "30", str(out), record_args=("--no-trace",))
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(out.read_text())
    assert len(run.steps) == truth["iterations"] == 30
    assert not any("called twice" in w for w in run.manifest["warnings"])
    if kind == "nnx":  # nnx's host work before dispatch is inside the step
        ours = statistics.median(run.steps["duration_s"].iloc[5:])
        theirs = statistics.median(truth["step_times_s"][5:])
        assert ours == pytest.approx(theirs, rel=0.1)


# -- interleaved eval --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eval_run(tmp: Path) -> tuple[object, dict]:
    out = tmp / "eval.json"
    proc, run = record(tmp / "eval", str(SCRIPTS / "jax_eval.py"), "20", "5", str(out), record_args=("--no-trace",))
    assert proc.returncode == 0, proc.stderr
    return run, json.loads(out.read_text())


def test_steps_with_an_eval_are_flagged_and_left_out_of_steady_state(eval_run) -> None:
    run, truth = eval_run
    # Steps are iterations (dispatch to dispatch): the eval after step i runs inside iteration i.
    # The eval after the last step has no next dispatch to reveal it; that step is the tail anyway.
    expected = [i for i in truth["eval_after"] if i + 1 < truth["iterations"]]
    assert run.steps.loc[run.steps["interleaved"], "step"].tolist() == expected == [4, 9, 14]
    doc = report(run)
    assert doc["steps"]["interleaved"] == 3
    left_out = run.steps["interleaved"] | run.steps["tail"] | run.steps["instrumented"] | (run.steps["step"] < doc["steps"]["warmup"])
    assert doc["steps"]["steady"] == int((~left_out).sum())


# -- -m packages and folders --------------------------------------------------------------------
def test_module_from_the_package_parent_folder(tmp: Path) -> None:
    out = tmp / "m.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    import subprocess

    # the installed `tpu-perf` command: the working folder is not on its sys.path (its own folder is);
    # `record -m` puts it there as `python -m` does (`python -P`, PYTHONSAFEPATH, would not: runner.py)
    command = Path(sys.executable).with_name("tpu-perf")
    proc = subprocess.run([str(command), "record", "-q", "--no-trace", "--store", str(tmp / "mod"), "-m", "pkgtrain.train", "7", str(out)], cwd=SCRIPTS, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = load_run(str(next((tmp / "mod").iterdir())))
    assert len(run.steps) == 7  # the step is jitted in a module the package's __init__ imports
    assert json.loads(out.read_text())["argv0"].endswith("pkgtrain/train.py")


def test_folder_with_main_runs_as_python_runs_it(tmp: Path) -> None:
    out = tmp / "dir.json"
    proc, run = record(tmp / "dir", "pkgtrain", "5", str(out), cwd=SCRIPTS, record_args=("--no-trace",))
    assert proc.returncode == 0, proc.stderr
    assert len(run.steps) == 5
    assert json.loads(out.read_text())["argv0"] == "pkgtrain"  # sys.argv[0] as typed


# -- stores that cannot be written --------------------------------------------------------------
def test_unwritable_store_is_one_line_and_exit_2(tmp: Path) -> None:
    a_file = tmp / "not-a-folder"
    a_file.write_text("x")
    script = str(SCRIPTS / "jax_forks.py")
    cases = {
        str(a_file): "is a file",
        str(a_file / "runs"): f"lies under {a_file}",
        "/proc/tpu-perf-runs": "cannot write run folders there",  # root can write anywhere but /proc
    }
    for store, problem in cases.items():
        proc = tpu_perf_cli("record", "--store", store, script, "3")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert store in lines[0] and problem in lines[0]
        assert "done" not in proc.stdout  # the script never started
    listing = tpu_perf_cli("ls", "--store", str(a_file))
    assert listing.returncode == 2 and "is a file" in listing.stderr and "no runs" not in listing.stderr


# -- smaller things users hit -------------------------------------------------------------------
def test_empty_script_and_late_trace_window_warn(tmp: Path) -> None:
    empty = tmp / "empty.py"
    empty.write_text("print('nothing to train')\n")
    proc, run = record(tmp / "empty", str(empty))
    assert proc.returncode == 0 and len(run.steps) == 0
    assert [w for w in run.manifest["warnings"] if "no training steps" in w] and not [w for w in run.manifest["warnings"] if "trace window" in w]
    proc, run = record(tmp / "late", str(SCRIPTS / "jax_eval.py"), "8", "5", str(tmp / "late.json"), record_args=("--trace-steps", "50:60"))
    assert proc.returncode == 0 and len(run.steps) == 8
    assert any("--trace-steps 50:60 starts after the last step (8 steps ran)" in w for w in run.manifest["warnings"])


def test_eval_compiles_are_not_step_recompiles(eval_run) -> None:
    doc = report(eval_run[0])
    assert doc["compile"]["other_after_warmup"] == {"jit(evaluate)": 1}
    assert doc["compile"]["after_warmup"] == 0 and "jit(evaluate)" not in doc["compile"]["after_warmup_functions"]


def test_ls_keeps_run_ids_whole_at_80_columns(eval_run) -> None:
    run = eval_run[0]
    proc = tpu_perf_cli("ls", "--store", str(Path(run.url).parent), env={"COLUMNS": "80"}, check=True)
    assert run.id in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_imported_cpu_trace_counts_one_cpu_in_both_places(tmp: Path) -> None:
    store = tmp / "imported"
    tpu_perf_cli("import", "--store", str(store), str(ROOT / "tests" / "data" / "cpu_only_rank34.pt.trace.json.gz"), check=True)
    run_id = next(store.iterdir()).name
    text = tpu_perf_cli("report", "--store", str(store), run_id, env={"COLUMNS": "200"}, check=True).stdout
    assert " 1 x cpu (cpu) " in text and "trace devices: 1 x cpu " in text and " 0 x cpu" not in text
