"""`torch.distributed.init_process_group` joins the recording to its job's run (collectors/job.py),
and from then on the loop's waits are timed: each step's `wait_s`, from which the job's straggler
is found (analyzers/hosts.py).

Waits are the calls in which a rank waits for the others: the collectives (`all_reduce`,
`broadcast`, `barrier`, ...) and `backward()`, where DistributedDataParallel all-reduces the
gradients and waits for the last bucket. Backward's own compute is the same on every rank, so what
is left of the iteration (`own_s`) differs by exactly the extra work of the slow rank.

The default process group is held until the recording ends. PyTorch's tutorial shape calls
`destroy_process_group()` and returns from the worker with its DDP model alive: the model's Reducer
then drops the group's last reference, and the group's destructor joins gloo's threads with the
interpreter lock held, while a gloo thread destroying the last backward's all-reduce needs that
lock (the work's thread-local state holds a Python object: backward stashes its contextvars there).
That deadlock hung the recorded job (both stacks caught: `std::thread::join` under
`~ProcessGroupGloo` from `Reducer` dealloc on the main thread; `gil_scoped_acquire` under
`~AsyncAllreduceWork` on gloo's). Held, the group outlives the model; tpu-perf lets it go at the end
of the recording, after gloo's threads have had the lock.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors import imports, job
from tpu_perf.collectors.session import Recorder

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "reduce", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "gather", "scatter", "gather_object", "scatter_object_list", "recv")
"""torch.distributed calls that block until other ranks take part (with async_op=False)."""
RELEASE_WAIT_S = 0.05
"""Seconds the held process group waits, the interpreter lock free, before it is let go."""


class _Patches:
    """Module attributes replaced for the recording, restored by `undo`."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self.held: list[Any] = []
        """Process groups kept alive until the recording ends (the module docstring says why)."""

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        self._saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def undo(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        if self.held:
            time.sleep(RELEASE_WAIT_S)  # the lock free: a gloo thread still destroying a work takes it now
            self.held.clear()
        self._saved.clear()


def _timed(rec: Recorder, compiling: Callable[[], bool], original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if compiling() or kwargs.get("async_op"):
            return original(*args, **kwargs)
        start = rec.now()
        try:
            return original(*args, **kwargs)
        finally:
            rec.waited(start, rec.now())

    return call


def _agree(dist: Any, rank: int) -> Callable[[str | None], str]:
    store = dist.distributed_c10d._get_default_store()

    def agree(proposal: str | None) -> str:
        if proposal is not None:
            store.set(job.AGREE_KEY, proposal)
            return proposal
        store.wait([job.AGREE_KEY], datetime.timedelta(seconds=job.AGREE_TIMEOUT_S))
        return store.get(job.AGREE_KEY).decode()

    return agree


def install(rec: Recorder, torch: Any) -> Callable[[], None]:
    """Wrap `init_process_group` once torch.distributed is imported; returns the undo."""
    patches = _Patches()
    compiling = torch.compiler.is_compiling

    def time_waits(dist: Any) -> None:
        for name in COLLECTIVES:
            patches.replace(dist, name, functools.partial(_timed, rec, compiling))
        patches.replace(torch.autograd, "backward", functools.partial(_timed, rec, compiling))

    def joined(dist: Any) -> None:
        try:
            patches.held.append(dist.distributed_c10d._get_default_group())
        except Exception:  # a private API: holding the group is a safeguard, never a condition of joining
            pass
        try:
            rank, world = dist.get_rank(), dist.get_world_size()
            if world > 1:
                time_waits(dist)
                job.join(rec, job.Membership(rank, world, "torch.distributed"), _agree(dist, rank))
        except Exception as exc:  # never break the script's start-up
            rec.warn(f"could not join this process's torch.distributed job ({type(exc).__name__}: {exc}); it was recorded as a run of its own")

    def hook(dist: Any) -> None:
        c10d = dist.distributed_c10d

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def init_process_group(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                joined(dist)
                return result

            return init_process_group

        patches.replace(dist, "init_process_group", wrap)
        if c10d.init_process_group is not dist.init_process_group:
            patches.replace(c10d, "init_process_group", wrap)

    imports.when_imported("torch.distributed", hook)
    return patches.undo
