"""One run per multi-process job: which job and which process this recording is.

Every process of a job runs the same `tpu-perf record` command and writes its own shard
(`<job>/hosts/<process_index>/`), so writers never share a file. The job's id is, in order:
- `TPU_PERF_RUN_ID`, set by a launcher;
- else agreed when the script joins the job, through the job's own coordination service
  (`jax.distributed.initialize`: the distributed runtime's key-value store; `torch.distributed`:
  the process group's store): process 0 proposes a fresh id, the others read it;
- else (a single process) the run's own id, as for any recording.
A process records as a run of its own until it joins, so a crash before then still leaves a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpu_perf.collectors.session import Recorder
from tpu_perf.store import layout

AGREE_KEY = "tpu_perf_run_id"
AGREE_TIMEOUT_S = 60.0
"""How long a process waits for process 0's id. Process 0 publishes it as soon as its own
`initialize` returns, which every process's returns with, so only an unrecorded process 0 waits."""

RANK_ENV = (("RANK", "WORLD_SIZE"), ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES"), ("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
"""(index, count) variables launchers set (torchrun, JAX's own names, Slurm, Open MPI), best first."""


@dataclass(frozen=True)
class Membership:
    """This process's place in its job."""

    process_index: int
    process_count: int
    framework: str
    """What told us: `jax.distributed`, `torch.distributed` or `environment`."""


def from_environment(env: Mapping[str, str] | None = None) -> Membership | None:
    """The membership a launcher's variables give before the script runs, if any."""
    env = os.environ if env is None else env
    for index_var, count_var in RANK_ENV:
        index, count = env.get(index_var, ""), env.get(count_var, "")
        if index.isdigit() and count.isdigit() and int(count) > 1 and int(index) < int(count):
            return Membership(int(index), int(count), "environment")
    return None


def start_shard(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(job id, shard) to create the run in at start: with `TPU_PERF_RUN_ID` a recording always
    goes into that job, in the shard of its index when a launcher gave one, else `<host>-<pid>`
    until it learns its index; without it, (None, None): a run of its own until it joins."""
    env = os.environ if env is None else env
    job_id = env.get(layout.RUN_ID_ENV) or None
    if job_id is None:
        return None, None
    member = from_environment(env)
    return job_id, str(member.process_index) if member else f"{layout.hostname()}-{os.getpid()}"


def join(rec: Recorder, member: Membership, agree: Callable[[str | None], str]) -> None:
    """Move `rec`'s run into its job's run as shard `member.process_index`.

    `agree(proposal)`: process 0 passes the id it proposes and gets it back once published; the
    others pass None and get process 0's. Never raises into the script: a failure only warns."""
    if member.process_count <= 1 or rec.job_id is not None:  # a second initialize: joined already
        return
    writer = rec.writer
    try:
        job_id = os.environ.get(layout.RUN_ID_ENV) or None
        if job_id is None:
            job_id = agree(layout.new_run_id() if member.process_index == 0 else None)
        rec.process_index = member.process_index
        writer.join_job(job_id, str(member.process_index), process_index=member.process_index, process_count=member.process_count, joined_by=member.framework)
        rec.job_id = job_id
    except Exception as exc:
        rec.warn(f"this process ({member.framework} process {member.process_index} of {member.process_count}) could not join its job's run ({type(exc).__name__}: {exc}); it was recorded as a run of its own")
