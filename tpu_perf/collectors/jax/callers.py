"""Who in the script's process asked for a JAX call: the first frame outside jax and tpu-perf,
whether it is installed library code (site-packages, the standard library) or the script's own,
and whether a checkpointing or logging library is on the way to it."""

from __future__ import annotations

import functools
import os
import sysconfig
from types import FrameType

_OWN_PACKAGES = ("jax", "jaxlib", "tpu_perf")
"""Packages whose frames sit between a JAX call and the code that asked for it."""
OCCASIONAL_MODULES: tuple[str, ...] = (
    "orbax", "flax.training.checkpoints", "flax.serialization", "tensorflow.io", "tensorboard", "tensorboardX",
    "torch.utils.tensorboard", "wandb", "mlflow", "clu.metric_writers", "aim", "neptune", "comet_ml",
)
"""Checkpointing and logging libraries: a loop calls them now and then (every N steps), so a
compile they ask for is theirs (orbax slices each replicated array at every save), not a
recompile of the step; a module (flax's layers, optax) called inside the step is not listed."""
_LIBRARY_ROOTS = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("purelib", "platlib", "stdlib")})


def asker(frame: FrameType | None) -> FrameType | None:
    """The first frame at or above `frame` outside jax and tpu-perf."""
    while frame is not None and frame.f_globals.get("__name__", "").split(".", 1)[0] in _OWN_PACKAGES:
        frame = frame.f_back
    return frame


def is_library(frame: FrameType) -> bool:
    """Whether `frame` runs installed code (orbax, equinox, flax) rather than the script's own."""
    return _installed(frame.f_code.co_filename)


@functools.lru_cache(maxsize=4096)
def _installed(filename: str) -> bool:
    """Cached: `jax.jit` may be called every step (a library's jit of a fresh lambda)."""
    return os.path.realpath(filename).startswith(_LIBRARY_ROOTS)


def package(frame: FrameType) -> str:
    """The top-level package of `frame`'s module (`equinox` for `equinox._jit`)."""
    return str(frame.f_globals.get("__name__", "")).split(".", 1)[0]


def occasional(frame: FrameType | None) -> bool:
    """Whether a checkpointing or logging library (OCCASIONAL_MODULES) is on the stack at `frame`."""
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if any(name == m or name.startswith(m + ".") for m in OCCASIONAL_MODULES):
            return True
        frame = frame.f_back
    return False
