"""Gradient accumulation inside the step function: `optax.MultiSteps`.

MultiSteps keeps the optimizer's update inside the jitted step: the script calls the step once per
micro-batch, and every k-th call applies the update. A step is an optimizer update, so the tracker
groups k calls into one step (`steps.micro_batches` = k, FLOPs per update = k calls' FLOPs).

`MultiSteps.update` is wrapped for the recording: it runs while a jitted function is being traced,
so the tracker knows which function accumulates, and with what k. A schedule (a callable
`every_k_schedule`) cannot be read before the run: that is said once, in a warning and `steps.note`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors import imports

MODULES: tuple[tuple[str, str], ...] = (("optax.transforms._accumulation", "MultiSteps"),)
"""(module, class) whose `update`, traced inside a jitted function, makes it accumulate."""


def every_k(multi_steps: Any) -> int | None:
    """MultiSteps' constant k, or None for a schedule (known only on the device)."""
    k = getattr(multi_steps, "_every_k_schedule", None)
    if callable(k):
        k = getattr(multi_steps, "_tpu_perf_k", None)
    return int(k) if isinstance(k, int) and not isinstance(k, bool) else None


def install(on_update: Callable[[Any], None]) -> Callable[[], None]:
    """Call `on_update(multi_steps)` each time a MultiSteps' `update` runs (while tracing); returns the undo."""
    undos: list[Callable[[], None]] = []

    def patch(module: Any, name: str) -> None:
        cls = getattr(module, name, None)
        if cls is None or "update" not in vars(cls) or "__init__" not in vars(cls):
            return
        update, init = vars(cls)["update"], vars(cls)["__init__"]

        @functools.wraps(update)
        def traced_update(self: Any, *args: Any, **kwargs: Any) -> Any:
            on_update(self)
            return update(self, *args, **kwargs)

        @functools.wraps(init)
        def remembering_init(self: Any, opt: Any, every_k_schedule: Any, *args: Any, **kwargs: Any) -> None:
            init(self, opt, every_k_schedule, *args, **kwargs)
            if isinstance(every_k_schedule, int):  # optax turns an int into a constant schedule
                self._tpu_perf_k = every_k_schedule

        cls.update, cls.__init__ = traced_update, remembering_init
        undos.append(lambda: (setattr(cls, "update", update), setattr(cls, "__init__", init)))

    for module_name, class_name in MODULES:
        imports.when_imported(module_name, functools.partial(patch, name=class_name))

    def undo() -> None:
        for step in reversed(undos):
            step()
        undos.clear()

    return undo
