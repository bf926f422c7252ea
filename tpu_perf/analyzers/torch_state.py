"""`memory.torch_state`: a PyTorch run's parameters, gradients and optimizer state, in bytes.

Counted from the tensors themselves at an optimizer step (`collectors/torch/state_bytes.py`). Where
the device reported a peak (CUDA, torch-tpu runtime samples), the rest of it is activations and
temporaries (with the allocator's cache): `remainder_bytes`. On a CPU there is no device peak.

A generation run (Hugging Face `generate()`, a token loop) takes no optimizer step: its parameters
are the model's weights and its `kv_cache_bytes` the largest cache a request held, both read from
the arrays when each request ended (`collectors/generation.py`); no gradients or optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_perf.analyzers.inference import run_requests
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
    """device_peak_bytes minus the bytes above: activations, temporaries, allocator cache."""
    kv_cache_bytes: int | None = None
    """A generation run: the largest KV cache one request held (bytes per position of all its rows x
    the positions it reached, prompt + generated - 1); None for a training run."""


def torch_state(run: Run, device_peak_bytes: int | None) -> TorchState | None:
    raw = run.manifest.get("torch_state_bytes")
    if not isinstance(raw, dict):
        return _generation_state(run, device_peak_bytes)
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


def _generation_state(run: Run, device_peak_bytes: int | None) -> TorchState | None:
    """Weights and the largest KV cache of a PyTorch run's generation requests; None without them."""
    requests, _, from_steps = run_requests(run)
    needed = ("weight_bytes", "kv_bytes_per_position", "prompt_positions", "token_steps")
    if from_steps or requests.empty or any(c not in requests for c in needed):
        return None
    known = requests.dropna(subset=list(needed))
    if known.empty:
        return None
    weights = int(known["weight_bytes"].max())
    kv = int((known["kv_bytes_per_position"] * (known["prompt_positions"] + known["token_steps"] - 1)).max())
    device = (run.manifest.get("hardware") or {}).get("platform")
    on_device = device_peak_bytes is not None and device not in (None, "cpu")
    return TorchState(parameters_bytes=weights, gradients_bytes=0, optimizer_state_bytes=0, optimizers=(), device=device,
                      device_peak_bytes=device_peak_bytes if on_device else None,
                      remainder_bytes=device_peak_bytes - weights - kv if on_device else None, kv_cache_bytes=kv)
