"""`memory.torch_state`: a PyTorch run's parameters, gradients and optimizer state, in bytes.

Counted from the tensors themselves at an optimizer step (`collectors/torch/state_bytes.py`). Where
the device reported a peak (CUDA, torch-tpu runtime samples), the rest of it is activations and
temporaries (with the allocator's cache): `remainder_bytes`. On a CPU there is no device peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class TorchState:
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    optimizers: tuple[str, ...]
    device: str | None
    device_peak_bytes: int | None
    """The device's peak memory in use (memory.peak_bytes) when runtime samples gave one."""
    remainder_bytes: int | None
    """device_peak_bytes minus the three above: activations, temporaries, allocator cache."""


def torch_state(run: Run, device_peak_bytes: int | None) -> TorchState | None:
    raw = run.manifest.get("torch_state_bytes")
    if not isinstance(raw, dict):
        return None
    params, grads, state = (int(raw.get(k) or 0) for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes"))
    on_device = device_peak_bytes is not None and str(raw.get("device") or "cpu") != "cpu"
    return TorchState(
        parameters_bytes=params,
        gradients_bytes=grads,
        optimizer_state_bytes=state,
        optimizers=tuple(raw.get("optimizers") or ()),
        device=raw.get("device"),
        device_peak_bytes=device_peak_bytes if on_device else None,
        remainder_bytes=device_peak_bytes - params - grads - state if on_device else None,
    )
