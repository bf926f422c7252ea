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

Recurrent layers are counted the same way: `nn.LSTM` on CPU runs oneDNN's `mkldnn_rnn_layer`, and
LSTM/GRU/RNN on CUDA and ROCm run cuDNN's `_cudnn_rnn` / MIOpen's `miopen_rnn`, none of which the
counter has a formula for (GRU and RNN on CPU, and all the `*Cell`s, decompose into counted
matmuls). Each layer's input and recurrent matmuls are 2 FLOPs per weight per token forward
(`2 * tokens * (W_ih.numel() + W_hh.numel())`, plus the projection of an LSTM with `proj_size`),
backward 2x forward (the gradients of the inputs and of the weights); gate nonlinearities are not
counted, as the counter does not count them in the cells either.

A module that holds weights (a parameter of 2 or more dimensions, other than an embedding table's)
yet counted 0 FLOPs in the counted step is named in one warning: its ops have no formula, and the
step's FLOPs leave it out.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tpu_perf.collectors.session import Recorder
from tpu_perf.collectors.torch.flop_dtypes import tallied_by_dtype

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


def _rnn_forward_flops(input_shape: Any, weights: list[Any]) -> int:
    """2 FLOPs per matrix weight per token: `weights` are the shapes of a layer's (or a flat list
    of layers' and directions') W_ih, W_hh, biases and W_hr, the matrices being the 2-D ones; the
    input is (tokens, features) packed, else (T, B, features) or (B, T, features)."""
    tokens = 1
    for d in list(input_shape)[:-1]:
        tokens *= int(d)
    per_token = sum(int(w[0]) * int(w[1]) for w in weights if w is not None and len(w) == 2)
    return 2 * tokens * per_token


def recurrent_mapping(torch: Any, analytic: dict[str, int]) -> dict[Any, Any]:
    """FlopCounterMode `custom_mapping` for the fused recurrent kernels it counts as 0 (oneDNN's
    LSTM layer on CPU, cuDNN and MIOpen RNNs), tallied into `analytic`."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def tally(flops: int) -> int:
        analytic["flops"] = analytic.get("flops", 0) + flops
        return flops

    def mkldnn(input: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return tally(_rnn_forward_flops(input, [w_ih, w_hh]))  # one layer, one direction a call

    def mkldnn_backward(input: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return tally(2 * _rnn_forward_flops(input, [w_ih, w_hh]))

    def fused(input: Any, weight: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return tally(_rnn_forward_flops(input, list(weight)))  # every layer and direction

    def fused_backward(input: Any, weight: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return tally(2 * _rnn_forward_flops(input, list(weight)))

    mapping: dict[Any, Any] = {}
    for name, fn in (("mkldnn_rnn_layer", mkldnn), ("mkldnn_rnn_layer_backward", mkldnn_backward),
                     ("_cudnn_rnn", fused), ("_cudnn_rnn_backward", fused_backward),
                     ("miopen_rnn", fused), ("miopen_rnn_backward", fused_backward)):
        op = getattr(aten, name, None)
        if op is not None and op not in fc.flop_registry:
            mapping[op] = fn
    return mapping


def analytic_mapping(torch: Any, analytic: dict[str, int]) -> dict[Any, Any]:
    """Every formula tpu-perf adds to the counter: attention and recurrent kernels."""
    return {**attention_mapping(torch, analytic), **recurrent_mapping(torch, analytic)}


class ModulesSeen:
    """Modules that ran in the counted step, named as the counter's ModuleTracker names them (the
    root's class, then attribute paths: `RNNModel.rnn`), to find those that hold weights but
    counted 0 FLOPs."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.names: dict[Any, str] = {}
        self.ran: dict[Any, None] = {}  # in the order they first ran
        self._handle: Any = None

    def start(self) -> None:
        self.names, self.ran = {}, {}

        def pre_hook(module: Any, args: Any) -> None:
            if module in self.ran:
                return
            self.names.setdefault(module, type(module).__name__)
            for child_name, child in module.named_children():
                self.names[child] = f"{self.names[module]}.{child_name}"
            self.ran[module] = None

        self._handle = self.torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def uncounted(self, counted: dict[str, dict[Any, int]]) -> list[str]:
        """`Class 'name'` of each module that ran, holds a weight matrix (not an embedding
        table's) and has no FLOPs in `counted` (the counter's per-module counts)."""
        embeddings = (self.torch.nn.Embedding, self.torch.nn.EmbeddingBag)
        out = []
        for module in self.ran:
            if isinstance(module, embeddings) or not any(p.dim() >= 2 for p in module.parameters(recurse=False)):
                continue
            name = self.names[module]
            if not sum(counted.get(name, {}).values()):
                out.append(f"{type(module).__name__} '{name}'")
        return out


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
        self._by_dtype: dict[str, int] = {}
        self._modules = ModulesSeen(torch)
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
        self._modules.stop()
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
        mode = FlopCounterMode(display=False, custom_mapping=analytic_mapping(self.torch, self._analytic))
        self._by_dtype = {}
        mode.flop_registry = tallied_by_dtype(mode.flop_registry, self.torch, self._by_dtype)
        self._modules.start()
        mode.__enter__()
        self._mode = mode
        self._stance = stance
        self._compiled_step = stance is not None
        self.counted_index = index
        self.rec.mark_instrumented()

    def _leave(self) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)
        self._modules.stop()
        self._restore_stance()
        counts = mode.get_flop_counts()
        uncounted = self._modules.uncounted(counts)
        if uncounted:
            more = f" and {len(uncounted) - 5} more" if len(uncounted) > 5 else ""
            self.rec.warn(f"FLOPs per step leave out {', '.join(uncounted[:5])}{more}: torch's FLOP counter has no formula "
                          "for their ops and counted 0 for them; pass --flops-per-step for utilisation")
        compiled = self._compiled_step
        total = int(mode.get_total_flops())
        analytic = int(self._analytic.get("flops", 0))
        by_op = {str(op): int(n) for op, n in counts.get("Global", {}).items()}
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
            "dot_flops_by_dtype": json.dumps(self._by_dtype) if self._by_dtype else None,
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
