"""FLOPs of one training iteration from the programs table: every program that runs in each
iteration times how often (`calls_per_step`: gradient accumulation's micro-batch program N times,
the update once), each with its loops counted by trip count (`loops.py`): proved by XLA, else
measured in the run's trace window."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpu_perf.analyzers.hlo import run_hlo
from tpu_perf.analyzers.loops import LoopFlops, loop_flops, measured_trips
from tpu_perf.analyzers.programs import step_program
from tpu_perf.store import Run


@dataclass(frozen=True, kw_only=True)
class IterationFlops:
    flops: float
    """Per device: the programs of one iteration, loops by trip count."""
    loop_extra_flops: float
    """Of which: loop-body matmuls beyond the once that XLA's cost analysis counts."""
    unknown_trip_loops: int
    """Loops whose trip count neither XLA proved nor the trace measured (counted once: FLOPs may be low)."""
    measured_trips: dict[str, float]
    """Mean trips per entry of the loops XLA did not prove, measured in the trace window (`program/while`)."""
    programs: int


def _loops(run: Run, row: pd.Series) -> LoopFlops | None:
    relpath = row.get("hlo_file")
    if not isinstance(relpath, str) or not relpath:
        return None
    try:
        module = run_hlo(run, relpath)
        return loop_flops(module, measured_trips(module, run.scalar_table("ops")))
    except (OSError, ValueError):
        return None


def _step_calls(row: pd.Series) -> int:
    """Calls of the step program per step: 1, or k when it accumulates itself (optax.MultiSteps)."""
    calls = pd.to_numeric(row.get("calls_per_step"), errors="coerce")
    return int(calls) if pd.notna(calls) and calls >= 1 else 1


def iteration_flops(run: Run, programs: pd.DataFrame, step_row: pd.Series) -> IterationFlops:
    rows = [(step_row, _step_calls(step_row))]
    if "calls_per_step" in programs:
        others = programs[~programs["is_step"].astype(bool) & (programs["calls_per_step"].fillna(0) > 0) & programs["flops"].notna()]
        rows += [(row, int(row["calls_per_step"])) for _, row in others.iterrows()]
    total = extra = 0.0
    unknown = 0
    trips: dict[str, float] = {}
    for row, calls in rows:
        loops = _loops(run, row)
        more = loops.extra_flops if loops else 0.0
        total += calls * (float(row["flops"]) + more)
        extra += calls * more
        unknown += loops.unknown_trip_loops if loops else 0
        trips |= {f"{row['function']}/{name}": n for name, n in (loops.measured_trips if loops else {}).items()}
    return IterationFlops(flops=total, loop_extra_flops=extra, unknown_trip_loops=unknown, measured_trips=trips, programs=len(rows))


def run_iteration_flops(run: Run) -> IterationFlops | None:
    """For the run's step program (None without one that has FLOPs); derived once per loaded Run."""

    def derive(r: Run) -> IterationFlops | None:
        programs = r.programs
        if programs.empty or "flops" not in programs:
            return None
        step = step_program(programs)
        return iteration_flops(r, programs, step) if step is not None and pd.notna(step["flops"]) else None

    return run.derived("iteration_flops", derive)
