"""CPU of building each dashboard chart, and whether another checkout's builders draw the same.

    PYTHONPATH=. python bench/dashboard_figures.py --store DIR [--against OTHER_CHECKOUT]

DIR is `bench/dashboard_scale.py --store DIR`'s store (100 runs x 10k steps): three of its runs give
the step, memory and report inputs; paced, few-step, empty, 8-device and 3-process inputs are made
from them. Prints each chart's CPU per build (median of `--builds`, after one build that pays
Plotly's lazy imports). With `--against`, the same charts from that checkout's
`tpu_perf/dashboard/figures.py` are built beside them and their JSON compared (as `st.plotly_chart`
sends it): "same" means the browser gets the same figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(store: Path) -> dict[str, Callable[[Any], Any]]:
    from tpu_perf.analyzers import ops_compare
    from tpu_perf.analyzers.step_phases import step_phases
    from tpu_perf.dashboard import data

    ids = sorted(p for p in store.iterdir() if (p / "run.json").exists())[:3]
    frames = [(f"run-{i}", step_phases(data.open_run(str(p), 0.0), 1, paced=False)) for i, p in enumerate(ids)]
    paced = frames[0][1].assign(pace_s=np.where(frames[0][1]["phase"] == "steady", frames[0][1]["duration_s"] * 2, np.nan))
    few = pd.DataFrame({"step": range(4), "t_s": [0.0, 1.0, 1.1, 1.2], "duration_s": [0.9e-3, 3e-3, 12e-3, 4e-3], "phase": ["warm-up", "steady", "steady", "steady"]})
    memory = [(f"run-{i}", data.memory_frame(str(p), 0.0)) for i, p in enumerate(ids)]
    eight = pd.concat([memory[0][1].assign(device=f"tpu:{d}", bytes_in_use=memory[0][1]["bytes_in_use"] * (1 + d / 10)) for d in range(8)], ignore_index=True)
    rng = np.random.default_rng(0)
    hosts = pd.DataFrame({"process_index": np.repeat([0, 1, 2], 700), "index": np.tile(np.arange(700), 3), "duration_s": rng.random(2100), "own_s": rng.random(2100), "hostname": np.repeat(["h0", "h1", None], 700)})
    docs = {f"run-{i}": data.report(data.RunRef(id=p.name, url=str(p), name=p.name, status="completed", stamp=0.0, started_at=None))[0] for i, p in enumerate(ids[:2])}
    ops = ops_compare.ops_side_by_side(docs, "run-0", same_program=True)
    return {
        "step time, 3 runs, log": lambda m: m.step_times(frames),
        "step time, 3 runs, linear over wall time": lambda m: m.step_times(frames, log=False, x="wall"),
        "step time, a loop that runs ahead + 4 steps": lambda m: m.step_times([("p", paced), ("s", few)]),
        "step time, empty": lambda m: m.step_times([("e", few.iloc[:0])]),
        "box plots, 3 runs + 2 steps": lambda m: m.step_distribution([(label, m.steady_step_times(f)) for label, f in frames] + [("few", np.array([0.01, 0.012]))]),
        "memory over time, 3 runs + 8 devices": lambda m: m.memory_timeline([*memory, ("eight", eight)]),
        "memory band, 3 runs + 8 devices + empty": lambda m: m.memory_band([*memory, ("eight", eight), ("none", eight.iloc[:0])]),
        "hosts x steps, 3 x 700": lambda m: m.hosts_heatmap(hosts),
        "top ops, 2 runs": lambda m: m.top_ops(ops, list(docs)),
        "fusions by kind": lambda m: m.fusion_bars({"a": {"kLoop": 3, "kInput": 1}, "b": {"kLoop": 2}}, ["a", "x", "b"]),
    }


def _history_case(store: Path) -> Callable[[Any], Any]:
    """The History chart of the store's runs index by start time (the bench store: 3 series, 12 change points)."""
    from tpu_perf.analyzers.history import build_history
    from tpu_perf.analyzers.index_row import load_index

    history = build_history(load_index(str(store)), order_by="started")
    return lambda m: m.history_figure(history)


def _cpu(build: Callable[[], Any], builds: int) -> float:
    build()
    spent = []
    for _ in range(builds):
        start = time.process_time()
        build()
        spent.append(time.process_time() - start)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--against", type=Path, help="another checkout whose figure builders to compare with")
    parser.add_argument("--builds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("TPU_PERF_CACHE_DIR", tempfile.mkdtemp())
    import plotly.io

    from tpu_perf.dashboard import figures, history_figure

    other = _module(args.against / "tpu_perf/dashboard/figures.py", "figures_against") if args.against else None
    other_history = _module(args.against / "tpu_perf/dashboard/history_figure.py", "history_against") if args.against else None
    differ = 0
    print(f"CPU per build, median of {args.builds}; load average {os.getloadavg()[0]:.1f}")
    cases = [(name, case, figures, other) for name, case in _cases(args.store).items()]
    cases.append(("History, by start", _history_case(args.store), history_figure, other_history))
    for name, case, module, against in cases:
        mine = _cpu(lambda case=case, module=module: case(module), args.builds)
        line = f"  {name:<44} {mine * 1e3:7.1f} ms"
        if against is not None:
            theirs = _cpu(lambda case=case, against=against: case(against), args.builds)
            same = json.loads(plotly.io.to_json(case(module).to_dict(), validate=False)) == json.loads(plotly.io.to_json(case(against).to_dict(), validate=False))
            differ += not same
            line += f"   against {theirs * 1e3:7.1f} ms   {'same' if same else 'DIFFERENT'}"
        print(line)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
