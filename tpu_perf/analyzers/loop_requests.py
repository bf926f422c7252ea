"""A whole request inside one compiled loop: flax lm1b's `predict_step` decodes a batch of prompts in
one `lax.while_loop` that stops at EOS or the length limit, so the script calls one jitted function
per request and no function carries state.

Then each call of the step program is a request of `rows` sequences, where `rows` is the first
dimension of its integer output of rank 2 long enough to hold the loop's trips (the tokens), and
the loop's mean trips per call, measured in the trace window (`flops.measured_trips`), are its
tokens per row. The first token is made inside the loop, not seen apart from the rest: time to
first token and inter-token gaps are unknown, and the time per output token is the call's time over
its trips (the prompt's processing included, when the loop feeds the prompt too). A call that
started or stopped tpu-perf's trace window is counted at a plain call's median time: the rest is
tpu-perf's own (analyzers/own_time.py, the rule every request path follows), as in the all-in step time.

A `lax.scan` or `fori_loop` decoder (a fixed number of new tokens) has trips XLA proved: it is
taken for one when its loop samples a token per trip and carries it (`decode_loops`), and its
integer output holds a token per row per trip, either way round.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tpu_perf.analyzers.decode_loops import decoding_loops, token_rows
from tpu_perf.analyzers.hlo import run_hlo
from tpu_perf.analyzers.iteration import run_iteration_flops
from tpu_perf.analyzers.own_time import step_own_time
from tpu_perf.analyzers.programs import step_program
from tpu_perf.analyzers.steps import run_steps
from tpu_perf.store import Run
from tpu_perf.store.layout import SIGNATURE_SUFFIX

SOURCE = "auto:while-loop"

_INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def loop_requests(run: Run) -> pd.DataFrame:
    """One `requests` row per call of a step program that decodes a whole request in one loop;
    empty when the run is not such a run (a training step, no measured loop, no token output)."""
    step = step_program(run.programs)
    iteration = run_iteration_flops(run)
    if step is None or iteration is None:
        return pd.DataFrame()
    trips = [t for name, t in iteration.measured_trips.items() if name.startswith(f"{step['function']}/")]
    rows = _token_rows(run, step, trips[0]) if len(trips) == 1 else None
    if rows is None and not trips:  # a scan or fori_loop decoder: the trips XLA proved
        trips, rows = _proven_decoding(run, step)
    steps = run_steps(run)
    if rows is None or steps.empty:
        return pd.DataFrame()
    start = steps["start_time_s"].to_numpy(float)
    own = step_own_time(steps)  # a call that started or stopped the trace: beyond a plain call's time, tpu-perf's own
    took = steps["end_time_s"].to_numpy(float) - start - own  # the wall-clock iteration: the call, its wait and the loop's own work
    return pd.DataFrame({
        "request": np.arange(len(steps)),
        "source": SOURCE,
        "start_time_s": start,
        "first_token_time_s": np.nan,
        "end_time_s": start + took,
        "prompt_tokens": np.nan,
        "sequences": rows,
        "generated_tokens": rows * trips[0],
        "token_steps": trips[0],
        "own_s": own,
    })


def _proven_decoding(run: Run, step: pd.Series) -> tuple[list[float], int | None]:
    """Tokens per row and rows of a step whose one loop with a trip count XLA proved samples a token
    per trip and carries it (`decode_loops`): its integer output holds the tokens, batch-major
    (rows, tokens) or time-major, one per trip (and one more when the first is sampled before the
    loop), its rows those of the carried token."""
    hlo = step.get("hlo_file")
    try:
        loops = decoding_loops(run_hlo(run, hlo)) if isinstance(hlo, str) else []
    except (OSError, ValueError):
        return [], None
    proven = [(loop, n) for loop, n in loops if n]
    if len(proven) != 1:
        return [], None
    loop, trips = proven[0]
    carried = set(token_rows(loop))
    # one token per row per trip, and maybe the first sampled before the loop (after the prefill)
    found = {(s[0], s[1]) for s in _token_outputs(run, step) if s[1] in (trips, trips + 1) and s[0] in carried}
    found |= {(s[1], s[0]) for s in _token_outputs(run, step) if s[0] in (trips, trips + 1) and s[1] in carried}
    if len(found) != 1:
        return [], None
    rows, tokens = found.pop()
    return [float(tokens)], rows


def _token_outputs(run: Run, step: pd.Series) -> list[list[int]]:
    """Shapes of the step's integer outputs of rank 2; none for a step that updates state (a
    donated input, optimizer state) or whose signature was not kept."""
    hlo = step.get("hlo_file")
    stem = hlo.removesuffix(".hlo.txt") if isinstance(hlo, str) else None
    if stem is None or not run.exists(stem + SIGNATURE_SUFFIX):
        return []
    signature = json.loads(run.read_text(stem + SIGNATURE_SUFFIX))
    if any(row.get("donated") or row.get("category") == "optimizer_state" for row in signature.get("inputs") or ()):
        return []
    return [row["shape"] for row in signature.get("outputs") or () if row.get("dtype") in _INTEGER and len(row.get("shape") or ()) == 2]


def _token_rows(run: Run, step: pd.Series, trips: float) -> int | None:
    """Rows of the step's token output: an integer output of rank 2 with room for `trips` tokens."""
    tokens = [s for s in _token_outputs(run, step) if s[1] >= trips]
    return int(tokens[0][0]) if len(tokens) == 1 and tokens[0][0] > 0 else None
