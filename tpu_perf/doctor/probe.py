"""Runs jax in a child process to see the devices and start the profiler, as a recording would.

A child, because the failure this looks for is a segfault (jaxlib's profiler calling a libtpu with
another API size): the child dies, `tpu-perf doctor` reports it. JAX_PLATFORMS is removed so jax
loads libtpu's plugin the way it does on a TPU VM; `site` folders go first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

PROBE_TIMEOUT_S = 180.0
"""jax import, libtpu start and one tiny trace take a few seconds; a hung plugin must not hang doctor."""

_CODE = r"""
import json, sys, tempfile
import jax, jax.numpy as jnp
devices = jax.devices()
from jax._src import xla_bridge
errors = {k: str(v).splitlines()[0][:200] for k, v in (getattr(xla_bridge, "_backend_errors", {}) or {}).items()}
print("DEVICES " + json.dumps({"platform": devices[0].platform, "device_kind": devices[0].device_kind, "count": len(devices), "backend_errors": errors}), flush=True)
with tempfile.TemporaryDirectory() as d:
    jax.profiler.start_trace(d)
    jnp.ones(8).block_until_ready()
    jax.profiler.stop_trace()
print("PROFILER_OK", flush=True)
"""


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    devices: dict | None
    """platform, device_kind, count, backend_errors; None when jax did not get that far."""
    profiler_ok: bool
    returncode: int | None
    """None when it timed out; negative: killed by that signal (-11: segfault)."""
    error: str | None
    """The last line the child wrote to stderr when it failed."""


def run_probe(site: Sequence[str] = (), timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([*site, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # a running job may hold libtpu's lock file
    try:
        proc = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return ProbeResult(devices=None, profiler_ok=False, returncode=None, error=f"no answer in {timeout_s:.0f} s")
    devices = None
    for line in proc.stdout.splitlines():
        if line.startswith("DEVICES "):
            devices = json.loads(line.removeprefix("DEVICES "))
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    # jaxlib names an API size mismatch before it reads past the struct: that read segfaults
    # mostly, not always, so a trace that survived it still fails the check
    mismatch = [line for line in lines if "PLUGIN_Profiler_Api" in line]
    ok = proc.returncode == 0 and "PROFILER_OK" in proc.stdout and not mismatch
    telling = mismatch or lines[-1:]
    return ProbeResult(devices=devices, profiler_ok=ok, returncode=proc.returncode, error=None if ok else (telling[0][:300] if telling else None))
