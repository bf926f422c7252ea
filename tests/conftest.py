"""Shared fixtures: real recordings of real scripts, made once per session where they can be shared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# libtpu is installed with the `tpu` extra; on a CPU machine JAX would probe it for a TPU first.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# libtpu (loaded by jax[tpu] or torch-tpu) asks the GCE metadata server for the TPU's topology, with
# retries that take minutes off GCP (seen: torch-tpu autoloaded on a CPU machine stalled in
# backward()). jax sets this itself when imported; the torch-tpu environment has no jax.
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")


JAX_SET_ENV = ("TPU_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL")
"""Variables jax writes into os.environ when a test imports it in-process (TPU_LIBRARY_PATH: the
libtpu.so it found). A child that inherits them loads that libtpu, not the one on its own path."""


def user_env() -> dict[str, str]:
    """This process's environment without what jax set in it: what a user's shell would pass."""
    return {k: v for k, v in os.environ.items() if k not in JAX_SET_ENV}


def free_port() -> int:
    """A TCP port free on loopback now (for a job's rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


MULTIHOST_SCRIPTS = ROOT / "tests" / "scripts" / "multihost"


def tpu_perf_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m tpu_perf ARGS` in a subprocess, as a user would from a shell."""
    full_env = {**user_env(), "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"tpu-perf {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "runs"


WRONG_LIBTPU = "libtpu==0.0.52"
"""torch-tpu 0.2.0's libtpu: not the one jax 0.10.2 pins (0.0.42.*), so a real mismatched pair."""


@pytest.fixture(scope="session")
def wrong_libtpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a real libtpu wheel that jax did not choose, installed with pip --target.

    Put first on PYTHONPATH (or given to `tpu-perf doctor --site`), it shadows the environment's
    libtpu the way a hand-built environment with the wrong pin would."""
    target = tmp_path_factory.mktemp("wrong-libtpu")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), WRONG_LIBTPU], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"pip install --target {target} {WRONG_LIBTPU} failed:\n{proc.stderr[-2000:]}"
    return target


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI every dependency is installed, so a skipped test means a broken install: fail the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if os.environ.get("CI") and skipped and exitstatus == 0:
        reporter.write_line(f"CI: {skipped} test(s) skipped; CI installs every extra, so a skip is a failure here", red=True)
        session.exitstatus = 1
