"""Gradient accumulation inside the step function: `optax.MultiSteps`, Keras optimizers'
`gradient_accumulation_steps`.

Both keep the optimizer's update inside the jitted step: the script (or `model.fit`) calls the step
once per micro-batch, and every k-th call applies the update. A step is an optimizer update, so the
tracker groups k calls into one step (`steps.micro_batches` = k, FLOPs per update = k calls' FLOPs).

The optimizer's update method is wrapped for the recording: it runs while a jitted function is being
traced, so the tracker knows which function accumulates, and with what k. A MultiSteps schedule (a
callable `every_k_schedule`) cannot be read before the run: that is said once, in a warning and
`steps.note`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors import imports

MODULES: tuple[tuple[str, str, str, str], ...] = (
    ("optax.transforms._accumulation", "MultiSteps", "update", "optax.MultiSteps"),
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer", "stateless_apply", "keras gradient_accumulation_steps"),
)
"""(module, class, method, name): the method, traced inside a jitted function, makes it accumulate."""


def every_k(optimizer: Any) -> int | None:
    """The optimizer's constant k (1: no accumulation), or None for a schedule (known only on the device)."""
    if hasattr(optimizer, "gradient_accumulation_steps"):  # keras: None or an int >= 2
        return int(optimizer.gradient_accumulation_steps or 1)
    k = getattr(optimizer, "_every_k_schedule", None)
    if callable(k):
        k = getattr(optimizer, "_tpu_perf_k", None)
    return int(k) if isinstance(k, int) and not isinstance(k, bool) else None


def install(on_update: Callable[[Any, str], None]) -> Callable[[], None]:
    """Call `on_update(optimizer, name)` each time an accumulating optimizer's update method runs
    (while tracing); returns the undo."""
    undos: list[Callable[[], None]] = []

    def patch(module: Any, name: str, method: str, label: str) -> None:
        cls = getattr(module, name, None)
        if cls is None or method not in vars(cls):
            return
        update = vars(cls)[method]

        @functools.wraps(update)
        def traced_update(self: Any, *args: Any, **kwargs: Any) -> Any:
            on_update(self, label)
            return update(self, *args, **kwargs)

        setattr(cls, method, traced_update)
        undos.append(lambda: setattr(cls, method, update))
        if name == "MultiSteps" and "__init__" in vars(cls):
            _remember_k(cls, undos)

    for module_name, class_name, method, label in MODULES:
        imports.when_imported(module_name, functools.partial(patch, name=class_name, method=method, label=label))

    def undo() -> None:
        for step in reversed(undos):
            step()
        undos.clear()

    return undo


def _remember_k(cls: Any, undos: list[Callable[[], None]]) -> None:
    """MultiSteps turns an int k into a constant schedule: keep the int."""
    init = vars(cls)["__init__"]

    @functools.wraps(init)
    def remembering_init(self: Any, opt: Any, every_k_schedule: Any, *args: Any, **kwargs: Any) -> None:
        init(self, opt, every_k_schedule, *args, **kwargs)
        if isinstance(every_k_schedule, int):
            self._tpu_perf_k = every_k_schedule

    cls.__init__ = remembering_init
    undos.append(lambda: setattr(cls, "__init__", init))
