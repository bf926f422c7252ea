"""Provenance: a saved baseline says which code ran where and who saved it, and is written with
the umask; a --chip that is not the detected device is a warning in record and in report."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, report_doc, tpu_perf_cli

pytestmark = pytest.mark.slow


def test_baseline_file_carries_provenance_and_the_umask_mode(tmp_path: Path) -> None:
    store = str(tmp_path / "runs")
    tpu_perf_cli("record", "--store", store, "--tag", "side=base", "--no-trace", "-q", str(ROOT / "tests" / "scripts" / "gate_loop.py"), "--steps", "12", "--work", "5", check=True)
    out = tmp_path / "main.baseline.json"
    old = os.umask(0o022)
    try:
        tpu_perf_cli("baseline", "save", "main", "tag:side=base", "--store", store, "--out", str(out), cwd=ROOT, check=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # 0666 less the umask, not mkstemp's 0600
    run_json = next(Path(store).glob("*/run.json"))
    assert stat.S_IMODE(run_json.stat().st_mode) == 0o644
    doc = json.loads(out.read_text())
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    saved_by = doc["saved_by"]
    assert saved_by["tpu_perf"] and saved_by["host"] and saved_by["git"]["sha"] == head
    assert saved_by["command"][-4:] == ["--store", store, "--out", str(out)]
    (entry,) = doc["runs"]
    assert entry["provenance"]["git_sha"] == head and entry["provenance"]["command"][0].endswith("gate_loop.py")
    assert entry["provenance"]["host"] == saved_by["host"] and "fingerprint" in entry


def test_declared_chip_that_is_not_the_device_is_a_warning(tmp_path: Path) -> None:
    store = str(tmp_path / "runs")
    rec = tpu_perf_cli("record", "--store", store, "--chip", "v6e", "--no-trace", str(ROOT / "tests" / "scripts" / "gate_step.py"), "--work", "2", "--width", "32", "--steps", "10", check=True)
    assert "warning: --chip v6e does not match the detected device (cpu)" in rec.stderr
    run_id = next(Path(store).glob("*/run.json")).parent.name
    doc = report_doc(run_id, store)
    assert any(w.startswith("--chip v6e does not match the detected device (cpu)") for w in doc["run"]["warnings"])
    same = tpu_perf_cli("record", "--store", str(tmp_path / "other"), "--no-trace", str(ROOT / "tests" / "scripts" / "gate_step.py"), "--work", "2", "--width", "32", "--steps", "10", check=True)
    assert "does not match the detected device" not in same.stderr


def test_a_crashed_candidate_reaches_check_and_is_named_with_its_reason(tmp_path: Path) -> None:
    store = str(tmp_path / "runs")
    loop, crash = str(ROOT / "tests" / "scripts" / "gate_loop.py"), str(ROOT / "tests" / "scripts" / "crash_loop.py")
    for i, (base, cand) in enumerate(((loop, loop), (loop, crash))):
        for side, script in (("base", base), ("cand", cand)):
            args = [script, "--steps", "10", "--work", "5"] if script == loop else [script]
            proc = tpu_perf_cli("record", "--store", store, "--tag", f"side={side}", "--tag", f"pair={i}", "--no-trace", "-q", *args)
            assert proc.returncode == (1 if script == crash else 0), proc.stderr
    proc = tpu_perf_cli("check", "--store", store, "--baseline", "tag:side=base", "--candidate", "tag:side=cand", "--pair-by", "tag:pair", "--json")
    doc = json.loads(proc.stdout)
    runs = next(c for c in doc["checks"] if c["metric"] == "runs")
    assert (proc.returncode, doc["verdict"]) == (4, "BAD_DATA")
    assert runs["message"].endswith("failed: RuntimeError: out of memory in layer 3")
