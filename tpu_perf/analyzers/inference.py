"""The inference section: requests, latency per request and per token, throughput, and how much of
the chip's memory bandwidth each decode step used (MBU, the MFU of memory-bound decode).

Read from the `requests` and `tokens` tables (collectors/generation.py). Definitions follow vLLM's
serving benchmark: time to first token (TTFT) from a request's start to its first token; time per
output token (TPOT) = (end-to-end - TTFT) / (tokens per sequence - 1); inter-token latency (ITL) the
gaps between a request's consecutive tokens. A request of a batched call counts once per prompt row
(each row shares its call's times). Generated tokens/s divides every generated token by the wall time
from the first request's start to the last one's end: prefill included, as a user would clock it,
and tpu-perf's own trace start/stop left out (`own_s`, analyzers/own_time.py: one rule for every path).

The bytes a decode step must read are the weights plus the KV cache at its context length (read from
the model's arrays when the request ended); MBU = those bytes per decode step / the median time of a
decode step / the chip's HBM bandwidth (hardware/catalogue.toml). Unknown is None, with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpu_perf.analyzers.carried import carried_bytes
from tpu_perf.analyzers.exact import step_bytes_accessed
from tpu_perf.analyzers.flops import run_chip
from tpu_perf.analyzers.loop_requests import SOURCE as LOOP_SOURCE
from tpu_perf.analyzers.loop_requests import loop_requests
from tpu_perf.analyzers.own_time import own_time_within
from tpu_perf.analyzers.programs import step_program
from tpu_perf.analyzers.steps import run_steps
from tpu_perf.store import Run
from tpu_perf.store.layout import SIGNATURE_SUFFIX


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """p50 / p90 / p99 of a latency, seconds (numpy's linear interpolation)."""

    p50: float
    p90: float
    p99: float
    mean: float


@dataclass(frozen=True, kw_only=True)
class InferenceStats:
    requests: int
    """Prompts served (a batched call counts each of its rows)."""
    calls: int
    """Request calls seen (a batched `generate()` is one call for all its rows)."""
    source: str
    """Where the requests came from: `auto:generate` (Hugging Face), `explicit` (tpu_perf.request())."""
    prompt_tokens: int | None
    generated_tokens: int
    ttft_s: Percentiles | None
    """Time to first token, per request; None when no request produced a token."""
    tpot_s: Percentiles | None
    """Time per output token after the first, per request; None when no request made two tokens."""
    itl_s: Percentiles | None
    """Inter-token latency: gaps between a request's consecutive tokens."""
    e2e_s: Percentiles | None
    """End-to-end latency per request."""
    wall_s: float
    """From the first request's start to the last one's end, less `own_s`."""
    own_s: float = 0.0
    """tpu-perf's own time inside that span (a decode step or a request's call that started or
    stopped the trace window, beyond a plain one's time: analyzers/own_time.py), left out of
    `wall_s` on every request path: the script's own clock holds it."""
    tokens_per_s: float | None
    """Generated tokens over `wall_s` (prefill included)."""
    compile_s: float = 0.0
    """Compiling inside the requests (a first request's compiles, recompiles): the prefill and
    decode shares are of the requests that compiled nothing (where there are such; else of every
    request less its compile time)."""
    prefill_share: float | None
    """Share of the requests' time (compiles left out) before their first token (prompt processing)."""
    decode_share: float | None
    """Share of the requests' time (compiles left out) after their first token (decode steps)."""
    decode_step_s: float | None
    """Median gap between consecutive token steps of a request: one decode step."""
    decode_bytes_per_step: float | None
    """Bytes one decode step must read: weights + KV cache at its mean context length."""
    weight_bytes: float | None
    kv_cache_bytes: float | None
    """KV cache bytes at a decode step's mean context length (all rows of a call)."""
    decode_bytes_source: str | None
    decode_bytes_accessed: float | None
    """XLA's bytes accessed by the compiled decode step (reads and writes, temporaries included)."""
    achieved_bytes_per_s: float | None
    """decode_bytes_per_step / decode_step_s."""
    chip: str | None
    peak_bytes_per_s: float | None
    """HBM bandwidth of one device from the chip catalogue."""
    mbu: float | None
    """achieved_bytes_per_s / peak_bytes_per_s."""
    mbu_reason: str | None
    """Why `mbu` is None."""
    stalled_gaps: int | None = None
    """Gaps between a request's consecutive tokens that held another request's prefill (requests
    served at once); None without token times."""
    stall_share: float | None = None
    """Those gaps' time beyond a plain gap (the median of the others) over `wall_s`."""


def analyze_inference(run: Run) -> InferenceStats | None:
    """The run's inference section; None when it served no generation request."""
    requests, tokens, from_steps = run_requests(run)
    if requests.empty:
        return None
    rows = requests["sequences"].fillna(1).astype(int).to_numpy()
    start, end = requests["start_time_s"].to_numpy(float), requests["end_time_s"].to_numpy(float)
    first = pd.to_numeric(requests["first_token_time_s"], errors="coerce").to_numpy(float)
    generated = requests["generated_tokens"].fillna(0).to_numpy(float)
    ttft, tpot = first - start, _tpot(requests)
    gaps, weights = _token_gaps(tokens, requests)
    stalled, stall_s = _prefill_stalls(tokens, requests)
    # tpu-perf's trace start/stop inside the requests' span: per request where they are steps or calls, else from the run's steps (marks, generate())
    own = float(requests["own_s"].sum()) if "own_s" in requests else own_time_within(run_steps(run), float(start.min()), float(end.max()))
    wall = float(end.max() - start.min()) - own
    # the shares are of the requests' own work: a compile inside a request (the first one's, a
    # recompile) is a one-off that would read as prefill or decode time (decode-recompiles charges it)
    # (tracing and lowering too, which no compile event times): the requests that compiled nothing
    # where there are such, else every request less its compile time
    compiling = _compiling_within(run, start, end)
    steady = compiling == 0 if (compiling == 0).any() else np.ones(len(start), dtype=bool)
    total = float((end - start)[steady].sum() - compiling[steady].sum())
    before_first = ttft - _compiling_within(run, start, np.where(np.isfinite(first), first, start))
    prefill = float(np.nansum(before_first[steady])) if np.isfinite(ttft[steady]).any() else None
    # the median is robust to the steps that compiled (a JAX decode step compiles in the first request);
    # without token gaps (a request inside one compiled loop), the median time per output token
    decode_step = float(np.median(gaps)) if len(gaps) else (float(np.nanmedian(tpot)) if np.isfinite(tpot).any() else None)
    in_loop = bool(len(requests)) and (requests["source"] == LOOP_SOURCE).all()
    decode_bytes, weight, kv, source = _program_bytes(run) if (from_steps or in_loop) else _decode_bytes(requests)
    achieved = decode_bytes / decode_step if decode_bytes is not None and decode_step else None
    chip, peak, reason = _peak_bandwidth(run)
    if achieved is None and reason is None:
        reason = "the bytes a decode step reads are unknown (no model arrays were seen: requests marked by hand)" if decode_bytes is None else "no request made two tokens (no decode step)"
    prompt = requests["prompt_tokens"] if "prompt_tokens" in requests else pd.Series(dtype=float)
    return InferenceStats(
        requests=int(rows.sum()),
        calls=len(requests),
        source=", ".join(sorted(set(requests["source"].astype(str)))),
        prompt_tokens=int(prompt.sum()) if prompt.notna().all() and len(prompt) else None,
        generated_tokens=int(generated.sum()),
        ttft_s=_percentiles(ttft, rows),
        tpot_s=_percentiles(tpot, rows),
        itl_s=_percentiles(gaps, weights),
        e2e_s=_percentiles(end - start, rows),
        wall_s=wall,
        own_s=own,
        tokens_per_s=float(generated.sum()) / wall if wall > 0 else None,
        compile_s=float(compiling.sum()),
        prefill_share=prefill / total if prefill is not None and total > 0 else None,
        decode_share=1 - prefill / total if prefill is not None and total > 0 else None,
        decode_step_s=decode_step,
        decode_bytes_per_step=decode_bytes,
        weight_bytes=weight,
        kv_cache_bytes=kv,
        decode_bytes_source=source,
        decode_bytes_accessed=step_bytes_accessed(run) if from_steps else None,
        achieved_bytes_per_s=achieved,
        chip=chip,
        peak_bytes_per_s=peak,
        mbu=achieved / peak if achieved is not None and peak else None,
        mbu_reason=None if achieved is not None and peak else reason,
        stalled_gaps=stalled,
        stall_share=stall_s / wall if stall_s is not None and wall > 0 else None,
    )


def run_requests(run: Run) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """The run's requests (in start order) and their tokens, and whether they were built from the
    decode steps; derived once per loaded Run."""
    return run.derived("run_requests", _load_requests)


def _load_requests(run: Run) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    requests = run.table("requests")
    if requests.empty:  # a whole request inside one compiled loop, or none
        return loop_requests(run), pd.DataFrame(columns=["request", "time_s", "tokens"]), False
    requests = requests.sort_values("start_time_s", kind="stable").reset_index(drop=True)
    from_steps = "end_time_s" in requests and bool(requests["end_time_s"].isna().all())
    if from_steps:  # a prefill before each run of decode steps (collectors/jax/prefill.py)
        return (*_from_steps(requests, run_steps(run)), True)
    return requests, run.table("tokens"), False


def _tpot(requests: pd.DataFrame) -> np.ndarray:
    """Each request's time per output token after the first; NaN for one that made fewer than two."""
    per_row = requests["generated_tokens"].fillna(0).to_numpy(float) / np.maximum(requests["sequences"].fillna(1).to_numpy(float), 1)
    first = pd.to_numeric(requests["first_token_time_s"], errors="coerce").to_numpy(float)
    after_first = (requests["end_time_s"].to_numpy(float) - first) / np.maximum(per_row - 1, 1)
    # a first token not seen apart (made inside one compiled loop): the request's time over its tokens
    whole = (requests["end_time_s"].to_numpy(float) - requests["start_time_s"].to_numpy(float)) / np.maximum(per_row, 1)
    return np.where(per_row > 1, np.where(np.isnan(first), whole, after_first), np.nan)


def _compiling_within(run: Run, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Seconds of backend compiles (stamped at their end) inside each window [lo, hi]."""
    compiles = run.compiles
    if compiles.empty or not len(lo):
        return np.zeros(len(lo))
    backend = compiles[compiles["event"] == "backend_compile"]
    ends = backend["time_s"].to_numpy(float)
    starts = ends - backend["duration_s"].to_numpy(float)
    overlap = np.minimum(hi[:, None], ends[None, :]) - np.maximum(lo[:, None], starts[None, :])
    return np.clip(overlap, 0.0, None).sum(axis=1)


def request_tpots(run: Run) -> tuple[float, ...]:
    """Each request call's time per output token, in start order (a single run's samples for `check`)."""
    requests, _, _ = run_requests(run)
    return () if requests.empty else tuple(float(v) for v in _tpot(requests) if v == v)


def _percentiles(values: np.ndarray, weights: np.ndarray) -> Percentiles | None:
    """Percentiles of `values`, each counted `weights` times (a batched call's rows); NaN left out."""
    keep = np.isfinite(values)
    if not keep.any():
        return None
    sample = np.repeat(values[keep], weights[keep])
    p50, p90, p99 = np.percentile(sample, [50, 90, 99])
    return Percentiles(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(sample.mean()))


def _token_gaps(tokens: pd.DataFrame, requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between consecutive token steps of each request, with the request's rows as weights."""
    if tokens.empty:
        return np.array([]), np.array([], dtype=int)
    ordered = tokens.sort_values(["request", "time_s"], kind="stable")
    same = ordered["request"].to_numpy()
    gaps = np.diff(ordered["time_s"].to_numpy(float))
    inside = same[1:] == same[:-1]
    rows = requests.set_index("request")["sequences"].fillna(1).astype(int)
    weights = rows.reindex(same[1:][inside]).fillna(1).astype(int).to_numpy()
    return gaps[inside], weights


def _prefill_stalls(tokens: pd.DataFrame, requests: pd.DataFrame) -> tuple[int | None, float | None]:
    """(gaps between a request's tokens that hold another request's whole prefill, their time
    beyond the median of the other gaps): a prompt processed between other requests' decode steps.
    A request's own prefill ends at its first token, before any of its gaps."""
    if tokens.empty:
        return None, None
    ordered = tokens.sort_values(["request", "time_s"], kind="stable")
    same, times = ordered["request"].to_numpy(), ordered["time_s"].to_numpy(float)
    inside = same[1:] == same[:-1]
    lo, hi = times[:-1][inside], times[1:][inside]
    start = requests["start_time_s"].to_numpy(float)
    first = pd.to_numeric(requests["first_token_time_s"], errors="coerce").to_numpy(float)
    keep = np.isfinite(first)
    if not len(lo) or not keep.any():
        return 0, 0.0
    order = np.argsort(start[keep], kind="stable")
    begins = start[keep][order]
    soonest = np.minimum.accumulate(first[keep][order][::-1])[::-1]  # of the prefills starting at or after each, the first to end
    after = np.searchsorted(begins, lo, side="left")  # the prefills that start within or after the gap
    held = np.zeros(len(lo), bool)
    some = after < len(begins)
    held[some] = soonest[after[some]] <= hi[some]
    if not held.any():
        return 0, 0.0
    gaps = hi - lo
    plain = float(np.median(gaps[~held])) if (~held).any() else 0.0
    return int(held.sum()), float(np.maximum(gaps[held] - plain, 0.0).sum())


def _decode_bytes(requests: pd.DataFrame) -> tuple[float | None, float | None, float | None, str | None]:
    """(bytes per decode step, weights, KV cache at the mean context, source): weights + KV cache
    per position x the mean context of the decode steps, averaged over requests by decode steps."""
    needed = ("weight_bytes", "kv_bytes_per_position", "prompt_positions", "token_steps")
    if any(c not in requests for c in needed):
        return None, None, None, None
    known = requests.dropna(subset=list(needed))
    known = known[known["token_steps"] > 1]
    if known.empty:
        return None, None, None, None
    steps = known["token_steps"].to_numpy(float) - 1  # the first token came from the prefill
    # decode step i (1..n-1) reads the prompt and the i tokens before it: mean context prompt + n/2
    context = known["prompt_positions"].to_numpy(float) + known["token_steps"].to_numpy(float) / 2
    weight = float(np.average(known["weight_bytes"].to_numpy(float), weights=steps))
    kv = float(np.average(known["kv_bytes_per_position"].to_numpy(float) * context, weights=steps))
    return weight + kv, weight, kv, "the model's arrays: weights + KV cache at the mean decode context"


def _from_steps(requests: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests whose tokens are decode steps: each request's first token is its prefill's output,
    then one token per row for each step that started before the next request (at the step's
    outputs-ready time where seen, else its own end); tpu-perf's own time in its steps (`own_s`:
    the trace window's start or stop, as in a whole-request loop). A request whose prefill was a
    call of the decode step itself has no first-token time of its own: its outputs ready, or the
    next call's start where later (the token sampled and fed back), give it."""
    requests = requests.copy()
    if steps.empty:
        return requests.iloc[0:0], pd.DataFrame(columns=["request", "time_s", "tokens"])
    starts = steps["start_time_s"].to_numpy(float)
    ready = pd.to_numeric(steps.get("ready_time_s"), errors="coerce") if "ready_time_s" in steps else pd.Series(np.nan, index=steps.index)
    done = ready.fillna(steps["end_time_s"]).to_numpy(float)
    bounds = [*requests["start_time_s"].to_numpy(float)[1:], np.inf]
    rows: list[dict[str, float]] = []
    ends, generated, counts, own = [], [], [], []
    firsts, made = pd.to_numeric(requests["first_token_time_s"], errors="coerce").to_numpy(float), []
    for (_, request), upto, first in zip(requests.iterrows(), bounds, firsts, strict=True):
        width = int(request["sequences"] or 1)
        after = starts >= request["start_time_s"]
        if np.isnan(first):  # the decode step's own call was the prefill: the step that holds its start
            held = min(int(np.searchsorted(starts, request["start_time_s"], side="left")), len(starts) - 1)  # the prefill's own step starts with the request
            first, after = float(done[held]), np.arange(len(starts)) > held
            if held + 1 < len(starts) and starts[held + 1] < upto:  # sampled once the loop moved on to the next call (as the other path waits at it)
                first = max(first, float(starts[held + 1]))
        made.append(first)
        mine = done[after & (starts < upto)]
        times = [first, *mine.tolist()]
        rows += [{"request": request["request"], "time_s": t, "tokens": width} for t in times]
        ends.append(times[-1])
        counts.append(len(times))
        generated.append(width * len(times))
        own.append(own_time_within(steps, float(request["start_time_s"]), times[-1]))
    requests["first_token_time_s"], requests["end_time_s"], requests["generated_tokens"], requests["token_steps"], requests["own_s"] = made, ends, generated, counts, own
    return requests, pd.DataFrame(rows)


def _program_bytes(run: Run) -> tuple[float | None, float | None, float | None, str | None]:
    """(bytes per decode step, weights, KV cache, source) from the compiled decode step's arguments:
    what it must read each call. The arguments it carries from call to call are the cache (those it
    donates, else those it returns updated: `carried.py`); the rest, the weights."""
    row = step_program(run.programs)
    arguments = None if row is None else row.get("argument_bytes")
    if arguments is None or arguments != arguments:
        return None, None, None, None
    donated = row.get("alias_bytes")
    if donated is not None and donated == donated and donated > 0:
        kv, how = float(donated), "its donated ones: the KV cache"
    else:
        hlo = row.get("hlo_file")
        stem = hlo.removesuffix(".hlo.txt") if isinstance(hlo, str) else None
        signature = json.loads(run.read_text(stem + SIGNATURE_SUFFIX)) if stem and run.exists(stem + SIGNATURE_SUFFIX) else {}
        kv = carried_bytes(signature)
        how = "those it returns updated: the KV cache" if kv is not None else "none carried from call to call: no KV cache seen"
    return float(arguments), None if kv is None else float(arguments) - kv, kv, f"the decode step's arguments ({how})"


def _peak_bandwidth(run: Run) -> tuple[str | None, float | None, str | None]:
    """(chip, HBM bytes/s of one device, why None)."""
    chip = run_chip(run)
    if chip is None:
        return None, None, "the chip is unknown: pass --chip to `tpu-perf record`"
    if chip.hbm_gbps is None:
        return chip.name, None, f"the chip catalogue has no memory bandwidth for {chip.name}"
    return chip.name, chip.hbm_gbps * 1e9 / chip.devices_per_chip, None
