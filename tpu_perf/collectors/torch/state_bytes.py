"""Bytes of a PyTorch training's parameters, gradients and optimizer state, from the tensors themselves.

A global optimizer-step post hook (the one `steps.py` uses to find steps, registered a second time
here) looks at the optimizers as they step: after their `MEASURE_AT`-th step each has its state
(Adam's moments exist from the first step on) and its gradients. Tensors are counted once by
storage, so tied weights and views are not counted twice. Written to run.json as
`torch.state_bytes`; `tpu_perf.analyzers.at_peak.torch_state` reads it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors.session import Recorder

MEASURE_AT = 2
"""Optimizer steps seen (all optimizers together) before the tensors are counted."""


def _storage_bytes(tensors: list[Any], seen: set[int]) -> int:
    total = 0
    for t in tensors:
        try:
            storage = t.untyped_storage()
            key, size = storage.data_ptr() or id(storage), storage.nbytes()
        except Exception:  # a tensor without storage (meta, functional wrappers): its own bytes
            key, size = id(t), t.numel() * t.element_size()
        if key not in seen:
            seen.add(key)
            total += size
    return total


def count(optimizers: list[Any], torch: Any) -> dict[str, Any]:
    """Parameters, gradients and optimizer state of `optimizers`, in bytes, counted once each."""
    params = list({id(p): p for opt in optimizers for group in opt.param_groups for p in group["params"]}.values())
    grads = [p.grad for p in params if p.grad is not None]
    state = [v for opt in optimizers for s in opt.state.values() for v in (s.values() if isinstance(s, dict) else ()) if isinstance(v, torch.Tensor)]
    seen: set[int] = set()
    return {
        "parameters_bytes": _storage_bytes(params, seen),
        "gradients_bytes": _storage_bytes(grads, seen),
        "optimizer_state_bytes": _storage_bytes(state, seen),
        "optimizers": sorted({type(opt).__name__ for opt in optimizers}),
        "device": str(params[0].device) if params else None,
    }


def install(rec: Recorder, torch: Any) -> Callable[[], None]:
    """Count the tensors once, at the MEASURE_AT-th optimizer step; returns the undo function."""
    optim = importlib.import_module("torch.optim.optimizer")
    optimizers: dict[int, Any] = {}
    steps = [0]

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if steps[0] > MEASURE_AT or torch.compiler.is_compiling():
            return
        optimizers.setdefault(id(optimizer), optimizer)
        steps[0] += 1
        if steps[0] == MEASURE_AT:
            try:
                rec.writer.update_manifest(torch_state_bytes=count(list(optimizers.values()), torch))
            except Exception as exc:  # counting must never break the user's loop
                rec.warn(f"parameter/optimizer bytes not counted ({type(exc).__name__}: {exc})")

    handle = optim.register_optimizer_step_post_hook(hook)
    return handle.remove
