"""Facts about where a run happened: versions, flags, command line (the git state: tpu_perf/git_state.py)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
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


def host_facts() -> dict[str, Any]:
    return {"os": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(), "executable": sys.executable}
