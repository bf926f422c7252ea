"""Facts about where a run happened: versions, flags, git state, command line."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("tpu-perf", "jax", "jaxlib", "libtpu", "libtpu-nightly", "torch", "torch-tpu", "torch_xla", "flax", "optax", "numpy", "xprof", "tpu-info")
ENV_PREFIXES = ("XLA_", "LIBTPU_", "TPU_", "TORCH_TPU_", "JAX_", "PJRT_", "CUDA_VISIBLE_DEVICES", "NCCL_", "TORCH_DEVICE_BACKEND_AUTOLOAD", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_LOGS", "PYTORCH_")
"""Environment variables kept in the manifest: the ones that change what the compiler and runtime do."""


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def git_state(path: Path) -> dict[str, Any] | None:
    """sha, dirty flag and root of the git repository holding `path`, or None outside one."""
    folder = path if path.is_dir() else path.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=True).stdout.strip()

    try:
        root = git("rev-parse", "--show-toplevel")
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": dirty, "root": root}


def host_facts() -> dict[str, Any]:
    return {"os": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(), "executable": sys.executable}
