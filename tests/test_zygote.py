"""The tests' forked `record` (tests/zygote.py) is the process a cold `python -m tpu_perf record` is:
the same modules before the script, what the script sees of its process, exit codes and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, pythonpath, spawn, user_env

from tests.zygote import WARM, ForkedProcess, startup_key

pytestmark = pytest.mark.slow

PROBE = str(ROOT / "tests" / "scripts" / "process_probe.py")


@pytest.fixture(autouse=True)
def _forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare the forked process with the cold one, whatever the run's TPU_PERF_TEST_FORK."""
    monkeypatch.setenv("TPU_PERF_TEST_FORK", "1")


def _both(tmp_path: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, tuple[int, str, str]]:
    """`tpu-perf record ARGS` cold and forked, each into a store of its own (STORE in ARGS)."""
    full = {**user_env(), "PYTHONPATH": pythonpath(), **(env or {})}
    done = {}
    for how in ("cold", "forked"):
        argv = [a.replace("STORE", str(tmp_path / how)).replace("OUT", str(tmp_path / f"{how}.json")) for a in args]
        if how == "cold":
            proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", *argv], env=full, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        else:
            proc = spawn(argv, full, cwd=cwd)
            assert isinstance(proc, ForkedProcess)
        out, err = proc.communicate(timeout=120)
        done[how] = (proc.returncode, out, err)
    return done


def test_the_warm_modules_are_ones_record_imports_before_the_script(tmp_path: Path) -> None:
    """Nothing the zygote imports would be imported later (or never) in a cold recording: above
    all, no framework the recorder hooks as the script imports it."""
    env = {**user_env(), "PYTHONPATH": pythonpath()}
    dump = tmp_path / "mods.py"
    dump.write_text(f"import json, sys\njson.dump(sorted(sys.modules), open({str(tmp_path / 'mods.json')!r}, 'w'))\n")
    subprocess.run([sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), str(dump)], env=env, check=True, capture_output=True, timeout=120)
    before_script = set(json.loads((tmp_path / "mods.json").read_text()))
    warm = subprocess.run([sys.executable, "-c", f"import json, sys\nfor m in {WARM!r}: __import__(m)\nprint(json.dumps(sorted(sys.modules)))"], env=env, check=True, capture_output=True, text=True).stdout
    extra = set(json.loads(warm)) - before_script
    assert not extra, f"the zygote imports what a cold recording does not before the script: {sorted(extra)[:20]}"
    assert not {"jax", "torch", "tensorflow", "flax", "keras"} & set(json.loads(warm))


@pytest.mark.parametrize("extra_path", [False, True])
def test_the_script_sees_the_same_process(tmp_path: Path, extra_path: bool) -> None:
    """Also with a PYTHONPATH of its own (read only as Python starts: a zygote started with it)."""
    work = tmp_path / "work"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe_extra.py").write_text("HERE = 1\n")
    work.mkdir()
    env = {"PROBE_MARK": "m1", "PYTHONFAULTHANDLER": "1"}
    if extra_path:
        env["PYTHONPATH"] = f"{pythonpath()}{os.pathsep}{tmp_path / 'lib'}"
    done = _both(tmp_path, "record", "-q", "--no-trace", "--store", "STORE", PROBE, "OUT", env=env, cwd=work)
    assert [rc for rc, _, _ in done.values()] == [0, 0], done
    cold, forked = (json.loads((tmp_path / f"{how}.json").read_text()) for how in ("cold", "forked"))
    assert cold["argv"][0] == forked["argv"][0] == PROBE and cold["path0"] == forked["path0"] == str(Path(PROBE).parent)
    assert (forked["cwd"], forked["mark"]) == (str(work), "m1") == (cold["cwd"], cold["mark"])
    cold["argv"], forked["argv"] = cold["argv"][2:], forked["argv"][2:]  # OUT differs
    assert forked == cold  # its open pipes and sockets too: none of the zygote's or the waiter's left open
    assert forked["extra_importable"] is extra_path
    for how in ("cold", "forked"):  # what the run says it ran: tpu_perf's __main__ with the same arguments
        (run,) = [p for p in (tmp_path / how).iterdir() if (p / "run.json").exists()]
        argv = json.loads((run / "run.json").read_text())["argv"]
        assert argv[0].endswith("tpu_perf/__main__.py") and argv[1:3] == ["record", "-q"], argv


@pytest.mark.parametrize(("end", "code", "said"), [("raise", 1, "RuntimeError: the probe raised"), ("exit3", 3, "")])
def test_exit_codes_and_tracebacks_are_the_cold_ones(tmp_path: Path, end: str, code: int, said: str) -> None:
    done = _both(tmp_path, "record", "-q", "--no-trace", "--store", "STORE", PROBE, "OUT", "--end", end)
    (cold_rc, _, cold_err), (rc, out, err) = done["cold"], done["forked"]
    assert rc == cold_rc == code and "stepped" in out
    assert said in err and said in cold_err
    assert ("Traceback" in err) == ("Traceback" in cold_err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signal_ends_it_as_it_ends_a_cold_one(tmp_path: Path, sig: int) -> None:
    full = {**user_env(), "PYTHONPATH": pythonpath()}
    codes = []
    for how in ("cold", "forked"):
        argv = ["record", "-q", "--no-trace", "--store", str(tmp_path / how), PROBE, str(tmp_path / f"{how}.json"), "--end", "wait"]
        if how == "cold":
            proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", *argv], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        else:
            proc = spawn(argv, full, new_session=True)
            assert isinstance(proc, ForkedProcess)
        for line in proc.stdout:
            if "waiting" in line:
                break
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        codes.append(proc.returncode)
    assert codes[0] == codes[1] != 0, codes


def test_a_zygote_serves_only_commands_that_start_as_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/a", "HOME": "/h"}
    assert startup_key({**base, "PROBE_MARK": "x", "PYTHONFAULTHANDLER": "1"}) == startup_key(base)  # the child turns the fault handler on
    for other in ({**base, "PYTHONWARNINGS": "error"}, {**base, "PYTHONPATH": "/a:/b"}, {"PATH": "/bin"}, {**base, "LD_PRELOAD": "x.so"}, {**base, "FSSPEC_S3_ENDPOINT_URL": "http://h"}, {**base, "LC_ALL": "C"}):
        assert startup_key(other) != startup_key(base), other
    monkeypatch.setenv("TPU_PERF_TEST_FORK", "0")
    proc = spawn(["record", "--help"], {**user_env(), "PYTHONPATH": pythonpath()})
    assert not isinstance(proc, ForkedProcess)
    assert "Usage" in proc.communicate(timeout=120)[0] and proc.returncode == 0
