"""`tpu-perf doctor` in this environment (jax with its own libtpu), in the same environment with a
real wrong libtpu wheel put ahead of it (`--site`, as PYTHONPATH would), and against a real
libtpu-style metric service on loopback."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from pathlib import Path

from conftest import tpu_perf_cli
from metric_server import TOTAL_BYTES, MetricServer


def doctor(*args: str) -> tuple[int, dict[str, dict]]:
    proc = tpu_perf_cli("doctor", "--json", *args, timeout=400)
    doc = json.loads(proc.stdout)
    assert doc["ok"] == (proc.returncode == 0), proc.stdout
    return proc.returncode, {c["name"]: c for c in doc["checks"]}


def jax_libtpu_pin() -> str:
    """jax's own `tpu` extra pin, read here with a regex, not with tpu-perf's reader."""
    for text in md.requires("jax") or []:
        m = re.match(r"libtpu\s*(?P<spec>[^;]+);\s*extra\s*==\s*['\"]tpu['\"]", text)
        if m:
            return "libtpu" + m.group("spec").strip()
    raise AssertionError("jax states no libtpu pin in its tpu extra")


def test_the_environment_make_test_builds_passes(tmp_path: Path) -> None:
    code, checks = doctor("--store", str(tmp_path / "runs"))
    assert code == 0, checks
    pair = checks["jax -> libtpu"]
    assert pair["verdict"] == "ok" and pair["detail"].endswith(f"found libtpu {md.version('libtpu')}")
    assert jax_libtpu_pin() in pair["detail"]
    assert checks["profiler"]["verdict"] == "ok"
    assert checks["chip"]["verdict"] == "skip" and "no accelerator attached" in checks["chip"]["detail"]
    assert checks["store"]["verdict"] == "ok" and checks["xprof"]["detail"].startswith(f"xprof {md.version('xprof')}")
    assert f"jax {md.version('jax')}" in checks["packages"]["detail"]


def test_a_wrong_libtpu_is_named_with_its_pair_and_the_fix(tmp_path: Path, wrong_libtpu: Path) -> None:
    code, checks = doctor("--store", str(tmp_path), "--site", str(wrong_libtpu))
    assert code == 1
    jax_version, pin = md.version("jax"), jax_libtpu_pin()
    pair = checks["jax -> libtpu"]
    assert pair["verdict"] == "fail"
    assert pair["detail"] == f"mismatched pair: jax {jax_version} needs {pin} (its tpu extra), found libtpu 0.0.52"
    assert pair["fix"].startswith(f"pip install 'jax[tpu]=={jax_version}'")
    profiler = checks["profiler"]
    # the size mismatch segfaults the tracing process mostly, not always: either way it fails
    assert profiler["verdict"] == "fail" and "Unexpected PLUGIN_Profiler_Api size" in profiler["detail"]
    assert "killed by signal 11" in profiler["detail"] or "survived a profiler API mismatch" in profiler["detail"]
    assert profiler["detail"].endswith(f"cause: jax {jax_version} with libtpu 0.0.52 (jax pins {pin})")
    assert checks["jax -> jaxlib"]["verdict"] == "ok"  # only the broken pair is blamed


def test_text_output_is_one_line_per_check(tmp_path: Path, wrong_libtpu: Path) -> None:
    _, checks = doctor("--store", str(tmp_path), "--site", str(wrong_libtpu), "--no-probe")
    proc = tpu_perf_cli("doctor", "--store", str(tmp_path), "--site", str(wrong_libtpu), "--no-probe", env={"COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1 and len(lines) == len(checks)
    assert [line.split()[0] for line in lines] == [c["verdict"].upper() for c in checks.values()]
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed == [f"FAIL  jax -> libtpu: {checks['jax -> libtpu']['detail']}; fix: {checks['jax -> libtpu']['fix']}"]


def test_metric_service_answers_on_loopback_and_its_absence_fails(tmp_path: Path) -> None:
    server = MetricServer(devices=2).start()
    try:
        code, checks = doctor("--store", str(tmp_path), "--no-probe", "--tpu-metrics-addr", server.addr)
    finally:
        server.kill()
    assert code == 0
    assert checks["metric service"]["detail"] == f"libtpu answered at {server.addr} (flag): 2 device(s), {TOTAL_BYTES / 2**30:.1f} GiB HBM each"
    code, checks = doctor("--store", str(tmp_path), "--no-probe", "--tpu-metrics-addr", server.addr)  # killed: nothing listens
    assert code == 1 and checks["metric service"]["verdict"] == "fail" and checks["metric service"]["fix"]


def test_an_unwritable_store_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, checks = doctor("--store", str(blocker / "runs"), "--no-probe")
    assert code == 1
    store = checks["store"]
    assert store["verdict"] == "fail" and store["detail"].startswith(f"{blocker / 'runs'}: not writable") and "TPU_PERF_STORE" in store["fix"]
