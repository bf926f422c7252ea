"""Remote stores through fsspec, against a real S3 API server on loopback (moto's server mode):
a run streams to the store while it runs, so a killed recording leaves its steps there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MULTIHOST_SCRIPTS, ROOT, free_port, tpu_perf_cli, user_env

BUCKET = "team-runs"

pytestmark = pytest.mark.slow  # records real scripts in subprocesses (and serves them)


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1, reached the way users configure fsspec and boto: environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"FSSPEC_S3_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import s3fs

        s3fs.S3FileSystem(endpoint_url=env["FSSPEC_S3_ENDPOINT_URL"]).mkdir(BUCKET)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


LOOP = "import sys, time\nfor i in range(int(sys.argv[1])):\n    import tpu_perf\n    tpu_perf.step(i)\n    time.sleep(0.1)\n"


def test_record_ls_report_advise_check_dashboard_on_an_s3_store(s3_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    store = f"s3://{BUCKET}/done"
    tpu_perf_cli("record", "-q", "--store", store, "--name", "s3-run", "--no-trace", str(script), "12", env=s3_env, check=True)
    listed = json.loads(tpu_perf_cli("ls", "--json", "--store", store, env=s3_env, check=True).stdout)
    assert [r["name"] for r in listed] == ["s3-run"] and listed[0]["status"] == "completed" and listed[0]["steps"] == 12
    doc = json.loads(tpu_perf_cli("report", "--json", "--store", store, "s3-run", env=s3_env, check=True).stdout)
    assert doc["run"]["url"] == f"{store}/{listed[0]['id']}" and doc["steps"]["count"] == 12
    assert doc["steps"]["iteration_median_s"] == pytest.approx(0.1, rel=0.3)
    import s3fs

    names = {Path(p).name for p in s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"]).ls(f"{BUCKET}/done/{listed[0]['id']}")}
    assert "steps.parquet" in names and "steps.jsonl" not in names  # compacted, and the JSON lines gone
    assert ".report.json" in names and not Path(BUCKET).exists()  # the saved report on the store, not in a local folder of the bucket's name
    advice = json.loads(tpu_perf_cli("advise", "--json", "--store", store, "s3-run", env=s3_env, check=True).stdout)
    assert advice["run"]["id"] == listed[0]["id"] and advice["findings"]
    # a wide margin: the gate's statistics are not the subject here (12 sleeps of 0.1 s on a loaded machine
    # vary by more than the default 3 %, and a run against itself is then INCONCLUSIVE: exit 3)
    checked = tpu_perf_cli("check", "--json", "--store", store, "--baseline", "s3-run", "--candidate", "s3-run", "--margin", "0.5", env=s3_env)
    step = next(c for c in json.loads(checked.stdout)["checks"] if c["metric"] == "step_time")
    assert step["baseline"] == [pytest.approx(doc["steps"]["step_s"])] and step["method"] == "batch means"  # read; one run a side: an interval over its steps
    assert checked.returncode == 0 and step["verdict"] == "PASS" and step["ratio"] == 1.0  # a run against itself
    page = (  # the dashboard's run page, in a process of its own (no other test's Streamlit state)
        "from streamlit.testing.v1 import AppTest\n"
        "at = AppTest.from_string('from tpu_perf.dashboard.screens import run\\nrun.render()\\n', default_timeout=60)\n"
        "at.query_params['run'] = 's3-run'\nat.run()\n"
        "print(repr(at.exception), at.markdown[0].value if at.markdown else [e.value for e in at.error])"
    )
    env = {**user_env(), **s3_env, "PYTHONPATH": str(ROOT), "TPU_PERF_STORE": store, "TPU_PERF_CACHE_DIR": str(tmp_path / "cache")}
    shown = subprocess.run([sys.executable, "-c", page], env=env, capture_output=True, text=True, timeout=180).stdout
    assert shown.startswith("ElementList()") and listed[0]["id"] in shown, shown


def _wait_for_streamed_steps(s3_env: dict[str, str], prefix: str, count: int, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until a run under PREFIX has COUNT steps in the steps.jsonl it streams to the store."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        fs.invalidate_cache()
        for path in fs.glob(f"{prefix}/*/steps.jsonl"):
            if fs.cat(path).count(b"\n") >= count:
                return
        time.sleep(0.3)
    raise AssertionError(f"no {count} steps streamed to s3://{prefix} (recording exit code {proc.poll()})")


def test_a_killed_recording_has_its_steps_on_the_store(s3_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    store = f"s3://{BUCKET}/killed"
    env = {**user_env(), **s3_env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", "record", "-q", "--store", store, "--no-trace", str(script), "1000"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_streamed_steps(s3_env, f"{BUCKET}/killed", 20, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    listed = json.loads(tpu_perf_cli("ls", "--json", "--store", store, env=s3_env, check=True).stdout)
    assert len(listed) == 1 and listed[0]["status"] == "crashed"  # its process is gone: not "running"
    assert listed[0]["steps"] >= 20
    doc = json.loads(tpu_perf_cli("report", "--json", "--store", store, listed[0]["id"], env=s3_env, check=True).stdout)
    assert doc["steps"]["count"] == listed[0]["steps"]


def test_an_unreachable_store_is_one_line_before_the_script_runs(s3_env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = tpu_perf_cli("record", "-q", "--store", "s3://no-such-bucket/runs", str(script), env=s3_env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "s3://no-such-bucket/runs" in lines[0], proc.stderr
    assert not marker.exists()


def test_a_job_on_an_s3_store_is_one_run_with_a_shard_per_process(s3_env: dict[str, str], tmp_path: Path) -> None:
    """Both processes start as runs of their own on the store and move into the job's prefix once
    they joined; the prefixes they started under are gone."""
    import s3fs

    store, port = f"s3://{BUCKET}/job", str(free_port())
    env = {**user_env(), **s3_env, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", store, str(MULTIHOST_SCRIPTS / "torch_independent.py"), port, "12", "8"]
    procs = [subprocess.Popen(cmd, env={**env, "RANK_ID": str(i)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    for p in procs:
        out = p.communicate(timeout=240)[0]
        assert p.returncode == 0, out
    [run] = json.loads(tpu_perf_cli("ls", "--json", "--store", store, env=s3_env, check=True).stdout)
    assert run["processes"] == 2 and run["status"] == "completed" and run["steps"] == 12
    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"])
    assert [Path(p).name for p in fs.ls(f"{BUCKET}/job") if not Path(p).name.startswith(".")] == [run["id"]]  # (.index: the runs index)
    assert sorted(Path(p).name for p in fs.ls(f"{BUCKET}/job/{run['id']}/hosts")) == ["0", "1"]
    doc = json.loads(tpu_perf_cli("report", "--json", "--store", store, run["id"], env=s3_env, check=True).stdout)
    assert [(h["process_index"], h["steps"], h["status"]) for h in doc["hosts"]] == [(0, 12, "completed"), (1, 8, "completed")]
    assert [h["top_ops"] for h in doc["hosts"]] == [[], []] and doc["ops_spread"] == []  # --no-trace: no op on any host, not zeros


def test_a_pod_capture_imports_into_s3_shards_and_its_job_tables_are_queried_there(s3_env: dict[str, str], tmp_path: Path) -> None:
    """`import` tasks write each host's shard straight to the object store; the per-op query over
    hosts reads the shards' Parquet in place there, and gives what the same import gives locally."""
    from tpu_perf.traces.xplane_synth import write_pod

    files = write_pod(ROOT / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb", tmp_path / "log", hosts=3, copies=1)
    remote = tpu_perf_cli("import", str(tmp_path / "log"), "--store", f"s3://{BUCKET}/pod", env=s3_env, check=True).stdout.strip()
    local = tpu_perf_cli("import", str(tmp_path / "log"), "--store", str(tmp_path / "runs"), check=True).stdout.strip()
    assert remote.startswith(f"s3://{BUCKET}/pod/")
    doc = json.loads(tpu_perf_cli("report", "--json", remote, env=s3_env, check=True).stdout)
    ref = json.loads(tpu_perf_cli("report", "--json", local, check=True).stdout)
    assert [h["hostname"] for h in doc["hosts"]] == [f.stem.removesuffix(".xplane") for f in files]
    assert doc["ops_spread"] == ref["ops_spread"] and all(s["hosts"] == 3 for s in doc["ops_spread"])
    assert [h["top_ops"] for h in doc["hosts"]] == [h["top_ops"] for h in ref["hosts"]]
