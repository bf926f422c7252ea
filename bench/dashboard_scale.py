"""Dashboard scale: a store of 100 runs x 10k steps; time the runs page and a change of comparison.

    PYTHONPATH=. python bench/dashboard_scale.py [--runs 100] [--steps 10000] [--store DIR]

The store is synthetic but shaped by a real recording: examples/jax_mlp.py is recorded once (JAX on
CPU, with a trace window) and every run carries its HLO, trace files and tables, compile events and
program row, with 10k steps (a compiling first step, a recompile halfway), and per second the
samples of 8 TPU devices as libtpu and jax.memory_stats give them (memory, duty cycle, HLO queue,
execution-time histograms) and the host's. It is written with RunWriter in a temporary folder
(or DIR, reused when it exists).

Pages are run with Streamlit's AppTest, so the times are the server's script runs (what the
issue's budget is about), not the browser's drawing. "cold" is a fresh server with no summary kept
on disk; "warm" reuses what was loaded. Printed as seconds and as a ratio of the budget
(runs page 2 s, change of comparison 0.5 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RUNS_BUDGET_S = 2.0
COMPARE_BUDGET_S = 0.5
DEVICES = 8
SAMPLE_S = 1.0
BUCKET_BOUNDS_US = [float(2**k) for k in range(4, 24)]
TEMPLATE_TABLES = ("ops", "timeline", "devices", "device_steps")
"""Trace tables copied from the real recording (a trace window holds a few steps, whatever the run's length)."""


def record_template(folder: Path) -> Path:
    """One real recording of examples/jax_mlp.py (JAX on CPU, with a trace window): its HLO, trace
    tables, compile events and program row are what every synthetic run carries."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "tpu_perf", "record", "--store", str(folder), "-q", "--tokens-per-step", "4096", str(root / "examples" / "jax_mlp.py"), "--steps", "20", "--width", "256"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    (run,) = [p for p in folder.iterdir() if (p / "run.json").exists()]
    return run


def _steps(rng: np.random.Generator, start: float, steps: int, slow: float) -> pd.DataFrame:
    """Steps as the JAX collector writes them: a compiling first step, a recompile halfway, a traced window."""
    index = np.arange(steps)
    durations = rng.normal(0.1 + slow, 0.004, steps).clip(0.05)
    recompile = steps // 2
    durations[0], durations[recompile] = 20.0, 3.0
    ends = start + np.cumsum(durations)
    compiled = (index == 0) | (index == recompile)
    return pd.DataFrame({
        "step": index, "step_num": None, "start_time_s": ends - durations, "end_time_s": ends, "duration_s": durations,
        "compiled": compiled, "compile_s": np.where(index == 0, 19.0, np.where(compiled, 2.5, 0.0)),
        "traced": (index >= 3) & (index < 6), "instrumented": False,
        "source": "auto:jit(train_step)", "host": "bench", "process_index": 0,
    })  # fmt: skip


def _memory(rng: np.random.Generator, t: np.ndarray, i: int) -> pd.DataFrame:
    """Per sample: each device from libtpu and from jax.memory_stats, and the host's RSS (psutil)."""
    n = len(t)
    devs = np.tile([f"tpu:{d}" for d in range(DEVICES)], n)
    times = np.repeat(t, DEVICES)
    in_use = rng.integers(20e9, 28e9, n * DEVICES).astype(float)
    limit = 31.25 * 2**30
    libtpu = pd.DataFrame({"time_s": times, "device": devs, "bytes_in_use": in_use, "peak_bytes": np.nan, "limit_bytes": limit, "source": "libtpu"})
    jax_ = pd.DataFrame({"time_s": times, "device": devs, "bytes_in_use": in_use - 1e8, "peak_bytes": 28e9 + i, "limit_bytes": limit, "source": "jax.memory_stats"})
    host = pd.DataFrame({"time_s": t, "device": "host", "bytes_in_use": rng.integers(8e9, 9e9, n).astype(float), "peak_bytes": np.nan, "limit_bytes": np.nan, "source": "psutil"})
    out = pd.concat([libtpu, jax_, host]).sort_values("time_s", kind="stable").reset_index(drop=True)
    return out.assign(host="bench", process_index=0)


def _runtime(rng: np.random.Generator, t: np.ndarray) -> pd.DataFrame:
    """Per sample: libtpu's duty cycle, HLO queue and cumulative execution-time histogram per device; host CPU."""
    n = len(t)
    per_sample = rng.multinomial(10, np.full(len(BUCKET_BOUNDS_US) + 1, 1 / (len(BUCKET_BOUNDS_US) + 1)), size=n * DEVICES)
    cumulative = per_sample.reshape(n, DEVICES, -1).cumsum(axis=0).reshape(n * DEVICES, -1)
    libtpu = pd.DataFrame({
        "time_s": np.repeat(t, DEVICES), "device": np.tile([f"tpu:{d}" for d in range(DEVICES)], n), "source": "libtpu",
        "duty_cycle_pct": rng.uniform(80, 99, n * DEVICES), "hlo_queue_size": rng.integers(0, 4, n * DEVICES),
        "exec_count": cumulative.sum(axis=1), "exec_mean_us": rng.uniform(9e4, 1.1e5, n * DEVICES),
        "exec_bucket_counts": list(cumulative), "exec_bucket_bounds_us": [BUCKET_BOUNDS_US] * (n * DEVICES),
    })  # fmt: skip
    host = pd.DataFrame({"time_s": t, "device": "host", "source": "psutil", "cpu_percent": rng.uniform(5, 50, n), "process_cpu_percent": rng.uniform(50, 110, n)})
    out = pd.concat([libtpu, host]).sort_values("time_s", kind="stable").reset_index(drop=True)
    return out.assign(host="bench", process_index=0)


def _compiles(template: pd.DataFrame, shift_s: float, recompile_at: float) -> pd.DataFrame:
    """The template's compile events moved to this run's start, and the halfway recompile of train_step."""
    first = template.assign(time_s=template["time_s"] + shift_s)
    again = template[template["function"].astype(str).str.contains("train_step")].assign(time_s=recompile_at)
    return pd.concat([first, again]).reset_index(drop=True)


def write_store(store: Path, runs: int, steps: int, template: Path) -> list[str]:
    """`runs` completed runs of `steps` steps on 8 TPU devices, sampled every second, with the
    tables, HLO and trace files of a real recording."""
    from tpu_perf import load_run
    from tpu_perf.store import RunWriter

    real = load_run(str(template))
    rng = np.random.default_rng(0)
    ids = []
    for i in range(runs):
        start = 1.8e9 + i * 3600
        step_table = _steps(rng, start, steps, 0.001 * i)
        end = float(step_table["end_time_s"].iloc[-1])
        t = np.arange(start, end, SAMPLE_S)
        writer = RunWriter.create(str(store), {
            **{k: real.manifest.get(k) for k in ("argv", "command", "cwd", "git", "host_facts", "script", "versions", "step_source")},
            "name": f"run-{i:03d}", "tags": {"team": f"t{i % 4}"}, "started_at": start, "frameworks": ["jax"], "host": "bench",
            "hardware": {"device_kind": "TPU v6 lite", "device_count": DEVICES, "local_device_count": DEVICES, "platform": "tpu", "process_count": 1, "process_index": 0},
            "config": {**real.manifest["config"], "tokens_per_step": 65536}, "env": {"XLA_FLAGS": f"--xla_flag_{i % 3}"},
        })  # fmt: skip
        writer.write_table("steps", step_table)
        writer.write_table("memory", _memory(rng, t, i))
        writer.write_table("runtime", _runtime(rng, t))
        writer.write_table("compiles", _compiles(real.compiles, start - float(real.started_at), float(step_table["start_time_s"].iloc[steps // 2]) + 2.5))
        writer.write_table("sampler", pd.DataFrame({"time_s": [end], "source": ["sampler"], "event": ["stopped"], "detail": [f"samples={len(t)} interval_s={SAMPLE_S} cpu_s={0.004 * len(t):.3f}"], "host": "bench", "process_index": 0}))
        writer.write_table("programs", real.programs.assign(devices=DEVICES, flops=4.2e14 / DEVICES, calls=steps, calls_in_steps=steps - 3))
        for name in TEMPLATE_TABLES:
            shutil.copy(Path(template) / f"{name}.parquet", writer.dir / f"{name}.parquet")
        for sub in ("hlo", "trace"):
            shutil.copytree(Path(template) / sub, writer.dir / sub)
        writer.finish("completed", 0)
        ids.append(writer.run_id)
    return ids


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


_COMPONENTS: list[object] = []


def page(name: str) -> object:
    """A page as a started server runs it. A server discovers Streamlit components once when it
    starts; AppTest does it on the first run of every instance (about 0.1 s here, scanning every
    installed package), so the instances share one discovery, made once (see `discovery_s`)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(f"from tpu_perf.dashboard.screens import {name}\n{name}.render()\n", default_timeout=120)
    if hasattr(at, "_bidi_component_manager"):
        if not _COMPONENTS:
            from streamlit.components.v2.component_manager import BidiComponentManager

            manager = BidiComponentManager()
            manager.discover_and_register_components(start_file_watching=False)
            _COMPONENTS.append(manager)
        at._bidi_component_manager = _COMPONENTS[0]
    return at


def discovery_s() -> float:
    """What AppTest would add to each new page's first run: Streamlit's component discovery."""
    from streamlit.components.v2.component_manager import BidiComponentManager

    return timed(lambda: BidiComponentManager().discover_and_register_components(start_file_watching=False))


def check(at: object) -> object:
    if at.exception:  # type: ignore[attr-defined]
        raise SystemExit(f"page raised: {at.exception[0].message}")  # type: ignore[attr-defined]
    return at


def fresh_server(cache: Path) -> None:
    """What a server started now has: no run, report or summary in memory, none kept on disk."""
    import streamlit as st

    from tpu_perf.dashboard import data

    st.cache_data.clear()
    st.cache_resource.clear()
    getattr(data, "clear_caches", lambda: None)()  # absent before the dashboard had its own caches
    for f in cache.glob("*.json"):
        f.unlink()


def new_server_same_disk() -> None:
    """A server restarted: memory empty, the summaries kept on disk still there."""
    import streamlit as st

    from tpu_perf.dashboard import data

    st.cache_data.clear()
    st.cache_resource.clear()
    getattr(data, "clear_caches", lambda: None)()


def measure(store: Path, ids: list[str], cache: Path) -> dict[str, tuple[float, float]]:
    """One pass over the page loads of the issue's budgets: {label: (seconds, budget)}."""
    from tpu_perf.dashboard import data
    from tpu_perf.dashboard.screens import runs

    results: dict[str, tuple[float, float]] = {}
    fresh_server(cache)
    listed = timed(lambda: runs.runs_table([data.summary(r, compute=False) for r in data.list_refs(str(store))[0]]))
    results["cold: runs page, table listed from manifests (before analysis)"] = (listed, RUNS_BUDGET_S)
    fresh_server(cache)
    results["cold: runs page, first render, every run analysed"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
    fresh_server(cache)
    at = page("compare")
    at.query_params["runs"] = f"{ids[0]},{ids[1]}"
    results["cold: compare page, two runs never loaded"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
    at.multiselect(key="compare_runs").set_value([ids[2], ids[3]])
    results["cold: change of comparison to two runs never loaded"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
    at.multiselect(key="compare_runs").set_value([ids[0], ids[1]])
    results["warm: change of comparison back to loaded runs"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
    at.multiselect(key="compare_runs").set_value([ids[0], ids[1], ids[2]])
    results["warm: change of comparison, add a third loaded run"] = (timed(lambda: check(at.run())), COMPARE_BUDGET_S)
    check(page("runs").run())  # every summary kept on disk
    new_server_same_disk()
    results["warm: runs page, new server, summaries kept on disk"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
    results["warm: runs page, rerender"] = (timed(lambda: check(page("runs").run())), RUNS_BUDGET_S)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="passes; the median is printed")
    parser.add_argument("--store", type=Path, help="keep the synthetic store here (written once, reused by later runs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "runs"
        if not store.exists():
            template = record_template(Path(tmp) / "template")
            t_write = timed(lambda: write_store(store, args.runs, args.steps, template))
            print(f"store: {args.runs} runs x {args.steps} steps written in {t_write:.1f} s ({store})")
        ids = sorted(p.name for p in store.iterdir())
        cache = Path(tmp) / "cache"
        os.environ["TPU_PERF_CACHE_DIR"] = str(cache)
        os.environ["TPU_PERF_STORE"] = str(Path(tmp) / "empty")
        check(page("runs").run())  # imports Streamlit, plotly and the pages once, as a started server has
        check(page("compare").run())
        os.environ["TPU_PERF_STORE"] = str(store)
        from tpu_perf.dashboard import data

        passes = [measure(store, ids, cache) for _ in range(args.repeat)]
    print(f"{os.cpu_count()} CPU(s), {getattr(data, 'WORKERS', 1)} loader thread(s), load average {os.getloadavg()[0]:.1f} at the end; median of {args.repeat} (min-max)")
    print(f"(not counted: Streamlit's component discovery, once per server start, {discovery_s():.3f} s; AppTest would add it to each new page's first run)")
    for label, (_, budget) in passes[0].items():
        times = sorted(p[label][0] for p in passes)
        median = statistics.median(times)
        print(f"{label:<66} {median:6.3f} s  = {median / budget:4.2f} x budget ({budget} s)  ({times[0]:.3f}-{times[-1]:.3f})")


if __name__ == "__main__":
    main()
