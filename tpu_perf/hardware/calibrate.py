"""Measure the achieved matmul rate of this machine's first device, and keep it in the store.

CPUs (and chips missing from the catalogue) publish no peak. `tpu-perf calibrate --save` times
square matmuls in bf16 and fp32 with JAX (else PyTorch) and writes the best rate to
`<store>/calibration.json`, keyed by catalogue chip name or device kind. `record` copies that file
into the run's config, so a later report of the run uses the measured peak, labelled `measured`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tpu_perf.errors import DataError, UsageError
from tpu_perf.jsonio import dumps
from tpu_perf.store import layout
from tpu_perf.store.fs import filesystem, join, open_regular

CALIBRATION_FILE = "calibration.json"
MIN_TIMED_S = 0.2
"""Each dtype is timed over at least this long (after one warm-up call) so timer noise stays < 1 %."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    key: str
    """Catalogue chip name when known (`cpu`, `tpu-v6e`), else the device kind."""
    device_kind: str
    platform: str
    framework: str
    size: int
    """Side of the square matrices."""
    tflops: dict[str, float]
    """Achieved TFLOP/s per device, by dtype (`bf16`, `fp32`)."""
    measured_at: float
    host: str


def _best_rate(run: Callable[[], None], flops: float) -> float:
    run()  # compile / warm up
    best, start, calls = float("inf"), time.perf_counter(), 0
    while calls < 3 or time.perf_counter() - start < MIN_TIMED_S:
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return flops / best / 1e12


def _jax(size: int | None) -> tuple[str, str, int, dict[str, float]]:
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    n = size or (1024 if device.platform == "cpu" else 8192)
    rates = {}
    for name, dtype in (("bf16", jnp.bfloat16), ("fp32", jnp.float32)):
        a = jax.device_put(jnp.ones((n, n), dtype), device)
        f = jax.jit(lambda x, y: x @ y)
        rates[name] = _best_rate(lambda f=f, a=a: f(a, a).block_until_ready(), 2.0 * n**3)
    return device.device_kind, device.platform, n, rates


def _torch(size: int | None) -> tuple[str, str, int, dict[str, float]]:
    import torch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    kind = torch.cuda.get_device_name(0) if cuda else "cpu"
    n = size or (8192 if cuda else 1024)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rates = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.ones((n, n), dtype=dtype, device=device)
        rates[name] = _best_rate(lambda a=a: (torch.matmul(a, a), sync()), 2.0 * n**3)
    return kind, device.type, n, rates


def measure(framework: str | None = None, size: int | None = None) -> Calibration:
    """Time bf16 and fp32 matmuls on the first device of JAX (else torch); seconds on a CPU."""
    from importlib.util import find_spec

    from tpu_perf.hardware import lookup_chip

    if size is not None and size <= 0:
        raise UsageError(f"--size {size}: must be positive")
    choice = framework or ("jax" if find_spec("jax") else "torch" if find_spec("torch") else None)
    if choice not in ("jax", "torch"):
        raise UsageError(f"--framework {framework or ''}: install jax or torch to calibrate (expected jax or torch)")
    kind, platform, n, rates = (_jax if choice == "jax" else _torch)(size)
    chip = lookup_chip(kind) or (lookup_chip("cpu") if platform == "cpu" else None)
    return Calibration(key=chip.name if chip else kind, device_kind=kind, platform=platform, framework=choice, size=n, tflops=rates, measured_at=time.time(), host=layout.hostname())


def load_calibrations(store: str | None = None) -> dict[str, dict[str, Any]]:
    """Saved calibrations in `store` by key; {} when none was saved."""
    fs, base = filesystem(store or layout.default_store())
    path = join(base, CALIBRATION_FILE)
    if not fs.exists(path):
        return {}
    try:
        with open_regular(fs, path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: damaged calibration file ({exc}); rerun `tpu-perf calibrate --save`") from None
    return data if isinstance(data, dict) else {}


def save_calibration(cal: Calibration, store: str | None = None) -> str:
    """Add or replace this device's entry in `<store>/calibration.json`; return the file's path."""
    fs, base = filesystem(store or layout.default_store())
    fs.makedirs(base, exist_ok=True)
    data = load_calibrations(store)
    data[cal.key] = asdict(cal)
    path = join(base, CALIBRATION_FILE)
    with fs.open(path, "wb") as f:
        f.write(dumps(data, sort_keys=True).encode("utf-8"))
    return path


def calibrated_peak(calibrations: dict[str, dict[str, Any]], key: str | None, precision: str) -> float | None:
    """Measured TFLOP/s per device for a chip name or device kind, or None."""
    if not key:
        return None
    from tpu_perf.hardware import lookup_chip

    chip = lookup_chip(key)
    for k in (key, chip.name if chip else None):
        entry = calibrations.get(k) if k else None
        if entry and entry.get("tflops", {}).get(precision):
            return float(entry["tflops"][precision])
    return None
