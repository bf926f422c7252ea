"""FLOPs per training step from `torch.utils.flop_counter.FlopCounterMode` over one real step.

The counter is entered at the boundary that opens the chosen step and left at the next one, so it
sees forward, backward and optimizer of exactly one steady-state step. That step is marked
instrumented (the counter's Python dispatch slows it) and stays out of the step statistics.
`torch.compile`d code runs eagerly for that one step (`set_stance("force_eager")`): Dynamo would
otherwise skip or recompile frames under the counter, and the eager ops are the graph's ops.

Where the counter has no formula (CPU's flash attention kernel in torch 2.13 counts 0), torch's
attention formula (4*B*H*Sq*Sk*D forward) is mapped onto the CPU ops, with backward = 2x forward:
the matmuls of the attention math, as hand-written attention is counted (torch's own backward
formula also counts the flash kernel's recomputation of QK^T). What was added that way is kept
apart as `analytic_flops` and named in `flops_source`.
"""

from __future__ import annotations

import sys
from typing import Any

from tpu_perf.collectors.session import Recorder

FLOP_STEP = 1
"""The step counted: the first after warm-up step 0, moved past the trace window if they meet."""


def attention_mapping(torch: Any, analytic: dict[str, int]) -> dict[Any, Any]:
    """FlopCounterMode `custom_mapping` for attention ops it counts as 0, tallied into `analytic`."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        flops = int(fc.sdpa_flop_count(query, key, value))
        analytic["flops"] = analytic.get("flops", 0) + flops
        return flops

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        flops = 2 * int(fc.sdpa_flop_count(query, key, value))  # dQ, dK, dS, dV: the math's 4 matmuls
        analytic["flops"] = analytic.get("flops", 0) + flops
        return flops

    mapping: dict[Any, Any] = {}
    for name, fn in (("_scaled_dot_product_flash_attention_for_cpu", forward), ("_scaled_dot_product_flash_attention_for_cpu_backward", backward)):
        op = getattr(aten, name, None)
        if op is not None and op not in fc.flop_registry:
            mapping[op] = fn
    return mapping


COMPILED_HINT = (
    "FLOPs per step not counted: the script runs torch.compile'd code and this torch cannot run it "
    "eagerly for one step (torch.compiler.set_stance); pass --flops-per-step for utilisation"
)


def _dynamo_compiled() -> bool:
    """Whether Dynamo compiled any frame so far (its modules are loaded only if torch.compile ran)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None) if utils is not None else None
    return bool(counters and counters.get("frames", {}).get("total", 0))


def _eager_stance(torch: Any) -> Any:
    """Enter `torch.compiler.set_stance("force_eager")`: compiled code runs eagerly (no compile,
    no recompile) for the counted step, so the counter sees the same ops the graph computes."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        return None
    try:
        stance = set_stance("force_eager")
        stance.__enter__()
    except Exception:  # an older or changed API: no count rather than a broken step
        return None
    return stance


class FlopWindow:
    """Counts one step's FLOPs; produces the `programs` row the flops analyzer reads."""

    def __init__(self, rec: Recorder, torch: Any) -> None:
        self.rec = rec
        self.torch = torch
        window = rec.options.trace_steps
        step = FLOP_STEP
        if window is not None and window[0] <= step < window[1]:
            step = window[1]
        self.step = step
        self._window = window
        self._mode: Any = None
        self._stance: Any = None
        self._compiled_step = False
        self._analytic: dict[str, int] = {}
        self.row: dict[str, Any] | None = None
        self.counted_index: int | None = None

    def on_boundary(self, index: int) -> None:
        if self._mode is not None:
            self._leave()
        elif index == self.step and self.row is None:
            self._enter(index)

    def retry(self) -> None:
        """The counted step turned out to span more than one iteration (several optimizers per
        iteration were found while it ran): drop the count and count the next step instead."""
        if self._mode is None or self.counted_index is None:
            return
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        self._restore_stance()
        step = self.counted_index + 1
        if self._window is not None and self._window[0] <= step < self._window[1]:
            step = self._window[1]
        self.step, self.counted_index = step, None

    def _enter(self, index: int) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        stance = None
        if _dynamo_compiled():
            stance = _eager_stance(self.torch)
            if stance is None:
                self.row = {}  # counted nothing, and never will in this run
                self.rec.warn(COMPILED_HINT)
                return
        self._analytic = {}
        mode = FlopCounterMode(display=False, custom_mapping=attention_mapping(self.torch, self._analytic))
        mode.__enter__()
        self._mode = mode
        self._stance = stance
        self._compiled_step = stance is not None
        self.counted_index = index
        self.rec.mark_instrumented()

    def _leave(self) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        self._restore_stance()
        compiled = self._compiled_step
        total = int(mode.get_total_flops())
        analytic = int(self._analytic.get("flops", 0))
        by_op = {str(op): int(n) for op, n in mode.get_flop_counts().get("Global", {}).items()}
        self.row = {
            "function": "training step (torch)",
            "is_step": True,
            "calls": 1,
            "calls_in_steps": 1,
            "flops": float(total) if total else None,
            "flops_source": "flop_counter+analytic" if analytic else "flop_counter",
            "counted_eager": compiled,
            "analytic_flops": float(analytic),
            "flops_by_op": str(by_op),
            "counted_step": self.counted_index,
            "devices": 1,
            "bytes_accessed": None,
            "hlo_file": None,
        }

    def _restore_stance(self) -> None:
        stance, self._stance = self._stance, None
        if stance is not None:
            stance.__exit__(None, None, None)

    def close(self) -> None:
        """End of the script inside the counted step: leave it so no mode outlives the run."""
        if self._mode is not None:
            self._leave()
