"""Evals and checkpoints between training steps: the step they run in is flagged `interleaved`
(a long iteration for a known reason) and left out of the steady-state statistics.

Seen through `nn.Module.train(False)` (what `model.eval()` calls) and `torch.save` while a step is
open. Neither touches module hook dicts, so compiled modules do not recompile. Keras on the torch
backend calls `model.eval()` at every epoch's end, validation or not: the first step of each next
epoch is flagged too (it holds the epoch's end: metrics, callbacks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors.session import Recorder


def patch_interleaved(rec: Recorder, torch: Any) -> Callable[[], None]:
    """Wrap `Module.train` and `torch.save`; returns the undo."""
    module_cls = torch.nn.Module
    original_train, original_save = module_cls.train, torch.save
    compiling = torch.compiler.is_compiling

    @functools.wraps(original_train)
    def train(self: Any, mode: bool = True) -> Any:
        if not mode and not compiling():
            rec.steps.mark_interleaved()
        return original_train(self, mode)

    @functools.wraps(original_save)
    def save(*args: Any, **kwargs: Any) -> Any:
        if not compiling():
            rec.steps.mark_interleaved()
        return original_save(*args, **kwargs)

    module_cls.train, torch.save = train, save

    def undo() -> None:
        module_cls.train, torch.save = original_train, original_save

    return undo
