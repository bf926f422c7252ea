"""Run a callback when a module is imported, so collectors hook a framework only if the script uses it.

Importing JAX or torch ourselves would cost seconds and could initialise a backend before the script
sets its own flags; a post-import hook costs nothing for modules the script never imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.callbacks:
            return None
        busy = getattr(self._busy, "names", set())
        if fullname in busy:
            return None
        self._busy.names = busy | {fullname}
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.names = busy
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, finder = spec.loader, self
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            for callback in finder.callbacks.pop(fullname, []):
                callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_finder = _PostImportFinder()


def when_imported(name: str, callback: Callback) -> None:
    """Call `callback(module)` now if `name` is imported, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _finder.callbacks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def clear() -> None:
    """Forget pending callbacks (end of a recording)."""
    _finder.callbacks.clear()
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
