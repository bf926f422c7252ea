"""Device-to-host transfers per step in a PyTorch script: `.item()`, `.cpu()`, `.tolist()`,
`.numpy()`, printing or formatting a tensor, and Python reading a tensor as a number or a truth
value (`float(loss)`, `int(n)`, `bool(t)`, `if loss > x:`, in the script's own code), counted while
steps run.

Each of these makes the host wait for the device (on torch-tpu and CUDA the queued work must finish
before the value exists): PyTorch/XLA's debug analysis counts them as `TransferFromDevice`, and
more than 0.5 per step is its bar (the advisor's `host-sync` rule). Calls are counted when the code
that made them is the script's or a library's, not torch's own (printing a tensor calls `.item()`
inside torch: one transfer, counted once) and not tpu-perf's. On a CPU run the same calls are
counted: they are what would wait for the device on a TPU or GPU.

Written to `run.json` as `torch.syncs`: `count` (calls after the first step began), `steps` (the
steps they were counted over), `by_call` (count per method), `by_caller` (count per top-level package
of the code that made the call; `__main__` for the script) and `steps_with_sync`.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

METHODS = ("item", "cpu", "tolist", "numpy", "__repr__", "__format__", "__float__", "__int__", "__bool__")
"""Tensor methods that copy a value to the host (`__repr__`/`__format__`: printing a tensor;
`__float__`/`__int__`/`__bool__`: `float(t)`, `int(t)`, `bool(t)` and `if t > x:`)."""
TRACEABLE = ("cpu", "numpy")
"""Calls Dynamo puts in a compiled graph; the others break the graph wherever they are."""
SKIP_MODULES = ("torch", "tpu_perf")
"""Callers whose calls are not the script's: torch itself (inside printing, optimizers) and tpu-perf."""
SCRIPT_ONLY = ("__float__", "__int__", "__bool__")
"""Counted only when the script's own code (not an installed library) makes them: libraries read
tensors as numbers and truth values in CPU-side logic and guard the per-step ones for XLA (the
Hugging Face Trainer's NaN filter is `bool(torch.isnan(loss))`, skipped under torch_xla)."""
LIBRARY_DIRS = ("site-packages", "dist-packages")


class HostSyncs:
    """Counts the calls in `METHODS` made outside torch and tpu-perf, from the first step on."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.by_call: Counter[str] = Counter()
        self.by_caller: Counter[str] = Counter()
        """Which package's code made the calls: the fix differs (a Lightning `self.log(prog_bar=True)`
        is not a `.item()` the script wrote)."""
        self.step: int | None = None
        self.steps_with_sync: set[int] = set()
        self._originals: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def on_boundary(self, index: int) -> None:
        self.step = index

    def _count(self, name: str) -> None:
        if self.step is None:
            return
        frame = sys._getframe(2)
        while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("torch._dynamo"):
            frame = frame.f_back  # the compiler.disable wrapper's frames: the caller is above them
        package = frame.f_globals.get("__name__", "").split(".", 1)[0]
        if package in SKIP_MODULES:
            return
        if name in SCRIPT_ONLY and any(d in frame.f_code.co_filename for d in LIBRARY_DIRS):
            return
        with self._lock:
            self.by_call[name] += 1
            self.by_caller[package or "?"] += 1
            self.steps_with_sync.add(self.step)

    def install(self) -> Callable[[], None]:
        tensor = self.torch.Tensor
        for name in METHODS:
            original = getattr(tensor, name, None)
            if original is None:
                continue
            self._originals[name] = original
            setattr(tensor, name, self._wrap(name, original))

        def uninstall() -> None:
            for name, original in self._originals.items():
                setattr(tensor, name, original)
            self._originals.clear()

        return uninstall

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        count = self._count
        # Dynamo inlines this wrapper into compiled code: counting there would guard the compiled
        # code on the step index (a recompile once the first step begins) and break the graph at
        # sys._getframe. While Dynamo traces, it counts nothing. A sync that breaks the graph
        # anyway (`.item()`, `float(t)`, printing) is kept out of Dynamo, so the break falls where
        # it fell without tpu-perf and the sync is counted when it runs eagerly; the traceable
        # ones (`.cpu()`, `.numpy()`) stay in the user's graph, counted only when they run eagerly.
        compiler = getattr(self.torch, "compiler", None)
        compiling = getattr(compiler, "is_compiling", lambda: False)

        def counted(self_tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not compiling():
                count(name)
            return original(self_tensor, *args, **kwargs)

        if name not in TRACEABLE and compiler is not None:
            counted = compiler.disable(counted)
        counted.__name__, counted.__qualname__, counted.__doc__ = original.__name__, getattr(original, "__qualname__", name), original.__doc__
        return counted

    def summary(self, steps: int) -> dict[str, Any] | None:
        """`torch.syncs` for run.json over the `steps` the run wrote; None when no step began
        (nothing to count per step over). Calls after the last written step began (the last
        iteration's tail past its boundary, the script's end) count in that step, so the steps with
        a transfer are some of the run's steps (an open step the recorder dropped is none of them:
        "in 24 of 25 steps" of a 24-step run)."""
        if self.step is None or steps <= 0:
            return None
        with_sync = {min(i, steps - 1) for i in self.steps_with_sync}
        return {"count": int(sum(self.by_call.values())), "steps": steps, "steps_with_sync": len(with_sync), "by_call": dict(self.by_call), "by_caller": dict(self.by_caller)}
