"""The counted step's FLOPs by the dtype its matmuls ran in: the bf16 evidence of a PyTorch run.

JAX runs show the dtype of every matmul in their optimized HLO; PyTorch runs have no HLO, so the
f32-matmul finding could not be judged for them. Every op FlopCounterMode counts is a matmul,
convolution, attention or recurrent kernel; its first tensor argument's dtype at dispatch is the
dtype it ran in, after autocast's casts (the counter sits below autocast). Each counted op's FLOPs
are tallied by that dtype, in the names the HLO uses (`f32`, `bf16`, `f16`).
"""

from __future__ import annotations

from typing import Any

_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}


def dtype_name(dtype: Any) -> str:
    """`torch.float32` -> `f32`, as XLA names it."""
    name = str(dtype).removeprefix("torch.")
    return _NAMES.get(name, name)


def tallied_by_dtype(registry: dict[Any, Any], torch: Any, by_dtype: dict[str, int]) -> dict[Any, Any]:
    """`registry` (a FlopCounterMode's `flop_registry`: op -> formula) with each formula wrapped to
    add its FLOPs to `by_dtype` under its first tensor argument's dtype. The wrappers take the raw
    tensors (`_get_raw`); the formulas they call take them too (their shape wrapper reads shapes)."""
    tensor = torch.Tensor

    def wrap(formula: Any) -> Any:
        def counted(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
            flops = formula(*args, out_val=out_val, **kwargs)
            first = next((a for a in args if isinstance(a, tensor)), None)
            if first is not None and flops:
                key = dtype_name(first.dtype)
                by_dtype[key] = by_dtype.get(key, 0) + int(flops)
            return flops

        counted._get_raw = True  # type: ignore[attr-defined]
        return counted

    return {op: wrap(formula) for op, formula in registry.items()}
