"""One training iteration may step several optimizers (a GAN's discriminator, then its generator).

The optimizers that step in a loop iteration form a cycle, learned from the order of their first
steps: it is complete when the first optimizer steps again. One cycle is one training step, ending
at the step of the cycle's last optimizer. A single optimizer is a cycle of one (every step ends a
training step, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class OptimizerCycle:
    """Says which optimizer steps end a training step."""

    def __init__(self, on_grouped: Callable[[list[Any]], None]) -> None:
        self._order: list[int] = []
        self._names: list[Any] = []
        self.known = False
        self._on_grouped = on_grouped

    @property
    def size(self) -> int:
        return len(self._order)

    def ends_step(self, optimizer: Any) -> bool:
        key = id(optimizer)
        if not self._order:
            self._order, self._names = [key], [optimizer]
            return True  # step 0 (warm-up) ends at the first optimizer step, as with one optimizer
        if key not in self._order:
            self._order.append(key)
            self._names.append(optimizer)
            return self.known  # an optimizer that joins a known cycle becomes its last
        if not self.known:
            self.known = True
            if len(self._order) > 1:
                self._on_grouped(self._names)
        return key == self._order[-1]

    def describe(self) -> list[str]:
        return [type(o).__name__ for o in self._names]
