"""Bad input and faults: each leaves the user's data loadable and says what happened in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tests.conftest import ROOT, Recordings, report_doc, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.errors import DataError, RunNotFoundError
from tpu_perf.store.reader import TornLineWarning

SCRIPT = ROOT / "tests" / "scripts" / "jax_selftimed.py"


def test_missing_script_is_a_usage_error_and_leaves_nothing(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "--store", str(tmp_path / "runs"), str(tmp_path / "nope.py"))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.py: no such file" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_non_python_script_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "train.sh"
    bad.write_text("#!/bin/bash\necho hi && exit 1\n")
    proc = tpu_perf_cli("record", "--store", str(tmp_path / "runs"), str(bad))
    assert proc.returncode == 2
    assert "train.sh: not a Python script" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_script_raising_at_step_k_keeps_k_steps_and_traceback(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), str(SCRIPT), str(tmp_path / "o.json"), "--steps", "10", "--fail-at", "6")
    assert proc.returncode == 1
    assert "RuntimeError: boom at step 6" in proc.stderr
    run = load_run(next((tmp_path / "runs").iterdir()))
    assert run.status == "failed" and run.manifest["exit_code"] == 1
    assert len(run.steps) == 6
    assert "boom at step 6" in run.read_text("traceback.txt")
    assert run.manifest["error"]["message"] == "RuntimeError: boom at step 6"


def _start_recording(tmp_path: Path, steps: int) -> tuple[subprocess.Popen[str], Path]:
    store = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(store), str(SCRIPT), str(tmp_path / "o.json"), "--steps", str(steps), "--sleep", "0.05"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return proc, store


def _wait_for_steps(store: Path, count: int, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for jsonl in store.glob("*/steps.jsonl"):
            if len(jsonl.read_text().splitlines()) >= count:
                return jsonl.parent
        time.sleep(0.1)
    raise AssertionError(f"no {count} steps flushed in {timeout} s")


@pytest.mark.slow
def test_sigint_marks_run_interrupted_and_keeps_steps(tmp_path: Path) -> None:
    proc, store = _start_recording(tmp_path, 10_000)
    run_dir = _wait_for_steps(store, 8)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    run = load_run(run_dir)
    assert run.status == "interrupted"
    assert len(run.steps) >= 8
    assert (run_dir / "steps.parquet").exists() and not (run_dir / "steps.jsonl").exists()


@pytest.mark.slow
def test_sigkill_leaves_a_loadable_crashed_run(tmp_path: Path) -> None:
    proc, store = _start_recording(tmp_path, 10_000)
    run_dir = _wait_for_steps(store, 8)
    time.sleep(1.2)  # steps are flushed at least every second
    flushed = len((run_dir / "steps.jsonl").read_text().splitlines())
    proc.kill()
    proc.communicate(timeout=60)
    run = load_run(run_dir)
    assert run.status == "crashed"
    assert len(run.steps) >= flushed >= 8
    assert run.steps["step"].tolist() == list(range(len(run.steps)))
    assert report_doc(run_dir)["run"]["status"] == "crashed"


def _finished_run(recordings: Recordings, tmp_path: Path) -> Path:
    """A private copy, in tmp_path/runs, of a finished 4-step recording made once per session
    (conftest `recordings`): the tests damage it."""
    args = ("-q", "--no-trace", str(SCRIPT), str(recordings.root / "selftimed-o.json"), "--steps", "4")
    return recordings.copy(*args, dest_store=tmp_path / "runs")


@pytest.mark.slow
def test_corrupt_manifest_is_one_line_error_naming_the_file(recordings: Recordings, tmp_path: Path) -> None:
    run_dir = _finished_run(recordings, tmp_path)
    (run_dir / "run.json").write_text('{"id": "x", "status": ')
    with pytest.raises(DataError, match="run.json: damaged manifest"):
        load_run(run_dir)
    proc = tpu_perf_cli("report", str(run_dir))
    assert proc.returncode == 3
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(run_dir / "run.json") in lines[0]
    assert (run_dir / "steps.parquet").exists()  # nothing else touched


@pytest.mark.slow
def test_torn_last_line_is_dropped_with_a_warning(recordings: Recordings, tmp_path: Path) -> None:
    run_dir = _finished_run(recordings, tmp_path)
    steps = load_run(run_dir).steps
    (run_dir / "steps.parquet").unlink()
    lines = [json.dumps(r) for r in steps.to_dict("records")]
    (run_dir / "steps.jsonl").write_text("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reloaded = load_run(run_dir).steps
    assert len(reloaded) == len(steps)
    assert any(issubclass(w.category, TornLineWarning) and "steps.jsonl" in str(w.message) for w in caught)


@pytest.mark.slow
def test_damaged_middle_line_is_an_error_naming_the_file(recordings: Recordings, tmp_path: Path) -> None:
    run_dir = _finished_run(recordings, tmp_path)
    steps = load_run(run_dir).steps
    (run_dir / "steps.parquet").unlink()
    lines = [json.dumps(r) for r in steps.to_dict("records")]
    lines[1] = lines[1][:10]
    (run_dir / "steps.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"steps.jsonl: line 2 is not valid JSON"):
        _ = load_run(run_dir).steps


@pytest.mark.slow
def test_unknown_run_id_lists_close_matches(recordings: Recordings, tmp_path: Path) -> None:
    run_dir = _finished_run(recordings, tmp_path)
    run_id = run_dir.name
    typo = run_id[:-1] + ("0" if run_id[-1] != "0" else "1")
    with pytest.raises(RunNotFoundError, match=f"close matches: {run_id}"):
        load_run(typo, store=str(tmp_path / "runs"))
    proc = tpu_perf_cli("report", "--store", str(tmp_path / "runs"), typo)
    assert proc.returncode == 3 and run_id in proc.stderr
    # a unique prefix and the run's name both resolve
    assert load_run(run_id[:10], store=str(tmp_path / "runs")).id == run_id
    assert load_run("jax_selftimed", store=str(tmp_path / "runs")).id == run_id
