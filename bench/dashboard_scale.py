"""Dashboard scale: a store of 100 runs x 10k steps; time the runs page and a change of comparison.

    PYTHONPATH=. python bench/dashboard_scale.py [--runs 100] [--steps 10000]

The store is synthetic (written with RunWriter, as a recording would) in a temporary folder. Pages
are run with Streamlit's AppTest, so the times are the server's script runs (what the issue's budget
is about), not the browser's drawing. Printed as seconds and as a ratio of the budget
(runs page 2 s, change of comparison 0.5 s).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RUNS_BUDGET_S = 2.0
COMPARE_BUDGET_S = 0.5


def write_store(store: Path, runs: int, steps: int) -> list[str]:
    """`runs` completed runs of `steps` steps each, with memory samples and a step program."""
    from tpu_perf.store import RunWriter

    rng = np.random.default_rng(0)
    ids = []
    for i in range(runs):
        start = 1.8e9 + i * 3600
        durations = rng.normal(0.1 + 0.001 * i, 0.004, steps).clip(0.05)
        durations[0] = 20.0
        ends = start + np.cumsum(durations)
        writer = RunWriter.create(str(store), {
            "name": f"run-{i:03d}", "tags": {"team": f"t{i % 4}"}, "started_at": start, "frameworks": ["jax"],
            "hardware": {"device_kind": "TPU v6 lite", "device_count": 8, "platform": "tpu"},
            "config": {"tokens_per_step": 65536, "trace_steps": [3, 6]}, "versions": {"jax": "0.10.2"},
            "env": {"XLA_FLAGS": f"--xla_flag_{i % 3}"},
        })  # fmt: skip
        writer.write_table("steps", pd.DataFrame({
            "step": np.arange(steps), "start_time_s": ends - durations, "end_time_s": ends, "duration_s": durations,
            "compiled": np.arange(steps) == 0, "compile_s": np.where(np.arange(steps) == 0, 19.0, 0.0),
            "traced": (np.arange(steps) >= 3) & (np.arange(steps) < 6), "instrumented": False,
            "source": "auto:jit(train_step)", "host": "bench", "process_index": 0,
        }))  # fmt: skip
        t = np.arange(start, ends[-1], 1.0)
        writer.write_table("memory", pd.DataFrame({
            "time_s": np.repeat(t, 2), "device": np.tile(["TPU_0", "TPU_1"], len(t)),
            "bytes_in_use": rng.integers(20e9, 28e9, 2 * len(t)), "peak_bytes": 28e9 + i, "limit_bytes": 31.25 * 2**30,
            "source": "memory_stats", "host": "bench", "process_index": 0,
        }))  # fmt: skip
        writer.write_table("programs", pd.DataFrame([{
            "function": "train_step", "is_step": True, "calls": steps, "flops": 4.2e14, "devices": 8, "bytes_accessed": 2e12,
            "argument_bytes": 12e9, "output_bytes": 12e9, "temp_bytes": 4e9, "alias_bytes": 12e9, "peak_bytes": 16e9, "hlo_file": None,
        }]))  # fmt: skip
        writer.finish("completed", 0)
        ids.append(writer.run_id)
    return ids


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def page(name: str) -> object:
    from streamlit.testing.v1 import AppTest

    return AppTest.from_string(f"from tpu_perf.dashboard.screens import {name}\n{name}.render()\n", default_timeout=120)


def check(at: object) -> object:
    if at.exception:  # type: ignore[attr-defined]
        raise SystemExit(f"page raised: {at.exception[0].message}")  # type: ignore[attr-defined]
    return at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    import streamlit as st

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        t_write = timed(lambda: write_store(store, args.runs, args.steps))
        ids = sorted(p.name for p in store.iterdir())
        os.environ["TPU_PERF_STORE"] = str(store)
        os.environ["TPU_PERF_CACHE_DIR"] = str(Path(tmp) / "cache")
        print(f"store: {args.runs} runs x {args.steps} steps written in {t_write:.1f} s")
        check(page("runs").run())  # imports Streamlit, plotly and the pages once, as a started server has
        st.cache_data.clear()
        st.cache_resource.clear()
        for f in (Path(tmp) / "cache").glob("*.json"):
            f.unlink()
        results = {}
        from tpu_perf.dashboard import data
        from tpu_perf.dashboard.screens import runs

        first_paint = timed(lambda: runs.runs_table([data.summary(r, compute=False) for r in data.list_refs(str(store))[0]]))
        results["runs page, nothing cached: table listed (before analysis)"] = (first_paint, RUNS_BUDGET_S)
        results["runs page, nothing cached: every run analysed"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
        st.cache_data.clear()
        st.cache_resource.clear()
        results["runs page, first render of a new server (summaries kept)"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
        results["runs page, rerender"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
        at = page("compare")
        at.query_params["runs"] = f"{ids[0]},{ids[1]}"
        results["compare page, first two runs (not loaded before)"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
        at.multiselect(key="compare_runs").set_value([ids[2], ids[3]])
        results["change of comparison to two runs not loaded before"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
        at.multiselect(key="compare_runs").set_value([ids[0], ids[1]])
        results["change of comparison back to loaded runs"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
        at.multiselect(key="compare_runs").set_value([ids[0], ids[1], ids[2]])
        results["change of comparison: add a third loaded run"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
    for label, (seconds, budget) in results.items():
        print(f"{label:<62} {seconds:6.3f} s  = {seconds / budget:4.2f} x budget ({budget} s)")


if __name__ == "__main__":
    main()
