"""Server CPU of the dashboard's page changes: the run page and the compare page run by AppTest.

    PYTHONPATH=. python bench/dashboard_cpu.py --store DIR [--passes 3]

DIR is `bench/dashboard_scale.py --store DIR`'s store (100 runs x 10k steps). Prints, per step, the
CPU seconds of this process (every thread: the script runs in one, the loaders in others) and the
wall time; medians over `--passes` passes, each on other runs of the store and a fresh server; then
the CPU of one run's report build alone (`data._build`: report, verdict values, advice; what a
change that adds a never-loaded run waits for), median over `--builds` runs, caches cleared. CPU
time is what a loaded machine inflates least: compare two versions of the code with it (run this
file from each checkout, with PYTHONPATH at that checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dashboard_scale as ds  # noqa: E402


def _timed(out: dict[str, list[tuple[float, float]]], label: str, step: Callable[[], object]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    got = step()
    if got is not None:  # a page's AppTest (a report build checks itself)
        ds.check(got)
    out.setdefault(label, []).append((time.process_time() - cpu, time.perf_counter() - wall))


def _run_page(at: object, tab: str | None = None, linear: bool = False) -> Callable[[], object]:
    def step() -> object:
        if tab:
            at.session_state["run_tab"] = tab  # type: ignore[attr-defined]
        if linear:
            at.radio(key="run_scale").set_value("linear")  # type: ignore[attr-defined]
        return at.run()  # type: ignore[attr-defined]

    return step


def _compare(at: object, runs: list[str]) -> Callable[[], object]:
    def step() -> object:
        at.multiselect(key="compare_runs").set_value(runs)  # type: ignore[attr-defined]
        return at.run()  # type: ignore[attr-defined]

    return step


def _build(data: Any, run: Path) -> None:
    """One run's report, verdict values and advice, as a page's loader builds them; a failed build stops the bench."""
    got = json.loads(data._build(str(run), 0.0))
    if got["doc"] is None or got.get("advice_error"):
        raise SystemExit(f"report build failed: {got['error'] or got['advice_error']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--builds", type=int, default=30, help="runs whose report build is timed alone")
    args = parser.parse_args()
    from tpu_perf.dashboard import serve

    serve.preload()
    getattr(serve, "warm", lambda: None)()  # absent in older code
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        os.environ["TPU_PERF_CACHE_DIR"], os.environ["TPU_PERF_STORE"] = str(cache), str(Path(tmp) / "empty")
        ds.check(ds.page("run").run())  # the pages' first run, as a started server has had
        ds.check(ds.page("compare").run())
        os.environ["TPU_PERF_STORE"] = str(args.store)
        ids = sorted(p.name for p in args.store.iterdir() if (p / "run.json").exists())
        out: dict[str, list[tuple[float, float]]] = {}
        for k in range(args.passes):
            ds.fresh_server(cache)
            at = ds.page("run")
            at.query_params["run"] = ids[20 + k]
            _timed(out, "run page: cold (report built)", at.run)
            _timed(out, "run page: rerun", at.run)
            _timed(out, "run page: open the Memory tab", _run_page(at, tab="Memory"))
            _timed(out, "run page: back to Overview", _run_page(at, tab="Overview"))
            _timed(out, "run page: step-time axis to linear", _run_page(at, linear=True))
            a, b, c, d = ids[40 + 4 * k : 44 + 4 * k]
            at = ds.page("compare")
            at.query_params["runs"] = f"{a},{b}"
            _timed(out, "compare: cold, two runs never loaded", at.run)
            _timed(out, "compare: change to two runs never loaded", _compare(at, [c, d]))
            _timed(out, "compare: change back to loaded runs", _compare(at, [a, b]))
            _timed(out, "compare: add a third loaded run", _compare(at, [a, b, c]))
        from tpu_perf.dashboard import data

        for run_id in ids[60 : 60 + args.builds]:
            data.clear_caches()
            _timed(out, "report build alone, one run", lambda run_id=run_id: _build(data, args.store / run_id))
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f} at the end; median of {args.passes} passes, of {args.builds} builds (CPU min-max)")
    for label, spent in out.items():
        cpu = sorted(c for c, _ in spent)
        print(f"  {label:<44} CPU {statistics.median(cpu):.3f} s  wall {statistics.median(w for _, w in spent):.3f} s  ({cpu[0]:.3f}-{cpu[-1]:.3f})")


if __name__ == "__main__":
    main()
