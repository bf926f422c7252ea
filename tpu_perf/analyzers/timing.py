"""Which clock times a step for `tpu-perf check --timing cpu`: the process's CPU time per step where
it measures the step on a CPU runner, else wall time, and why, in words.

On a shared CPU runner a busy neighbour stretches the wall-clock iteration by whatever core time it
takes (a process here keeps one of two speed modes for its life, 3.5-4.4 against 7-10 ms a step),
while the CPU time the step's own threads use changes far less: on real recordings of a
compute-bound JAX step beside a busy process the unchanged pairs' ratio CV was 6.8 % on process CPU
time against 46 % on wall time (docs/ci.md, "Timing on a shared CPU"). CPU time is a measure of
work, not of time, so it stands in only where the step's work is CPU work: a CPU backend, and a
step that computes rather than waits (a sleep, a storage read or a device wait costs no CPU, and a
slower one would go unseen). Anywhere else wall time decides, and the check says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpu_perf.analyzers.run_values import RunValues

TIMINGS: tuple[str, ...] = ("wall", "cpu")
"""`--timing` values: the wall-clock iteration (the default), or CPU time per step where it applies."""

CPU_METRIC = "cpu_step_time"
"""The check's metric for the process's CPU time per step (`RunValues.cpu_step_s`)."""

CPU_BOUND_SHARE = 0.25
"""CPU time per step over the steady step time, below which a run's step is taken to wait rather
than compute: a sleeping or I/O-bound step uses a few percent; a compute-bound one beside a busy
neighbour that doubles its wall time still uses about half (0.37-0.53 measured here, in the slow
mode); XLA:CPU's worker threads take it above 1."""


def cpu_timing(baseline: Sequence[RunValues], candidate: Sequence[RunValues]) -> tuple[bool, str]:
    """(True, why CPU time per step decides) when every run ran on a CPU (a CPU device, or no
    framework and no device: the host's own loop), recorded its CPU time per step, and computed
    through its step (CPU_BOUND_SHARE); else (False, why wall time decides, naming runs)."""
    runs = [(side, r) for side, rs in (("baseline", baseline), ("candidate", candidate)) for r in rs]
    not_cpu = [f"{side} run {r.run_id} ran on {r.fingerprint.get('chip') or 'an unknown device'}" for side, r in runs if not _on_cpu(r)]
    if not_cpu:
        return False, f"wall time decides (--timing cpu stands in on a CPU runner only: {_some(not_cpu)})"
    missing = [f"{side} run {r.run_id}" for side, r in runs if r.cpu_step_s is None]
    if missing:
        return False, f"wall time decides (--timing cpu: no CPU time per step recorded in {_some(missing)}; a tpu-perf that records it records them again)"
    waits = [f"{side} run {r.run_id} used the CPU for {r.cpu_step_s / r.step_s:.0%} of its step" for side, r in runs if r.step_s and r.cpu_step_s is not None and r.cpu_step_s < CPU_BOUND_SHARE * r.step_s]
    if waits:
        return False, f"wall time decides (--timing cpu: {_some(waits)}, under {CPU_BOUND_SHARE:.0%}: the step waits or sleeps, which CPU time does not see)"
    return True, "CPU time per step decides (--timing cpu): every run ran on a CPU and computed through its step; the process's CPU time is far steadier than wall time beside other work on a shared runner (docs/ci.md, \"Timing on a shared CPU\")"


def _on_cpu(run: RunValues) -> bool:
    chip, framework = run.fingerprint.get("chip"), run.fingerprint.get("framework")
    return chip == "cpu" or (chip is None and framework is None)


def _some(items: Sequence[str], shown: int = 3) -> str:
    """The first few of `items`, and how many more."""
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more
