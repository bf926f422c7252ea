"""`jax.distributed.initialize` joins the recording to its job's run (see collectors/job.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors import job
from tpu_perf.collectors.session import Recorder


def membership(jax: Any) -> tuple[job.Membership, Callable[[str | None], str]] | None:
    """This process's place in the job JAX just joined, and the id agreement over its key-value
    store; None for a single process."""
    from jax._src import distributed

    state = distributed.global_state
    count, index, client = state.num_processes, state.process_id, state.client
    if client is None or not count or count <= 1 or index is None:
        return None

    def agree(proposal: str | None) -> str:
        if proposal is not None:
            client.key_value_set(job.AGREE_KEY, proposal)
            return proposal
        return str(client.blocking_key_value_get(job.AGREE_KEY, int(job.AGREE_TIMEOUT_S * 1000)))

    return job.Membership(int(index), int(count), "jax.distributed"), agree


def install(rec: Recorder, jax: Any) -> Callable[[], None]:
    """Wrap `jax.distributed.initialize`; returns the undo."""
    module = jax.distributed
    original = module.initialize

    @functools.wraps(original)
    def initialize(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            joined = membership(jax)
        except Exception as exc:  # a private API moved: record on, as a run of its own
            rec.warn(f"could not read this process's place in its jax.distributed job ({type(exc).__name__}: {exc}); it was recorded as a run of its own")
            joined = None
        if joined is not None:
            job.join(rec, *joined)
        return result

    module.initialize = initialize
    return lambda: setattr(module, "initialize", original)
