"""The cold runs page of 100 runs in Chromium: from the navigation to every run's numbers drawn.

    PYTHONPATH=$PWD .venv/bin/python bench/dashboard_runs_cold.py [--runs 100] [--store DIR] [--repeat 3] [--no-index]

"Cold" is a fresh `tpu-perf dashboard STORE` (started as a user starts it, no summary kept on disk)
and a fresh Chromium (no profile, nothing cached): the Streamlit front end is downloaded and
started, the server runs the page for the first time. Done is the moment the grid is drawn with
every run's numbers and the page's buttons are there (bench/dashboard_scale.py's RUNS_DONE_JS).

The store is bench/dashboard_scale.py's (runs of 10k steps on 8 devices, shaped by a real
recording; written into DIR once and reused). By default the runs carry their index rows, as runs
that ended under this tpu-perf do (built here once with `tpu-perf ls`, which is what `record`
writes when a run ends); `--no-index` removes them first: every run is then analysed.

Printed per pass and as the median: wall seconds (the budget is 2 s), and the CPU seconds the
server process and the browser's processes spent from the navigation to done. This machine may be
shared: wall time then includes waiting for a core, the CPU seconds do not (with the load average).
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

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dashboard_scale as scale  # noqa: E402  (the store, the server and Chromium's settings)

BUDGET_S = 2.0
ROOT = Path(__file__).resolve().parents[1]


def _cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _browser_processes() -> list[psutil.Process]:
    """Chromium's processes: descendants of this one (Playwright's driver starts them)."""
    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


def one_pass(store: Path, tmp: Path) -> tuple[float, float, float]:
    """(wall s, server CPU s, browser CPU s) of one cold runs page."""
    from playwright.sync_api import sync_playwright

    proc, url = scale._serve(store, tmp / f"cache-{time.monotonic_ns()}")
    server = psutil.Process(proc.pid)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=scale.CHROMIUM, args=scale.CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto("about:blank")
            servers = [server, *server.children(recursive=True)]
            before = (_cpu(servers), _cpu(_browser_processes()))
            page.goto(url, wait_until="commit")
            done_ms = page.wait_for_function(scale.RUNS_DONE_JS, polling="raf", timeout=scale.WAIT_MS).json_value()
            after = (_cpu(servers), _cpu(_browser_processes()))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return float(done_ms) / 1e3, after[0] - before[0], after[1] - before[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", type=Path, help="keep the synthetic store here (written once, reused)")
    parser.add_argument("--no-index", action="store_true", help="remove the runs' index rows first: every run is analysed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "runs"
        if not store.exists():
            template = scale.record_template(Path(tmp) / "template")
            scale.write_store(store, args.runs, args.steps, template)
        if args.no_index:
            shutil.rmtree(store / ".index", ignore_errors=True)
            for row in store.glob("*/index.parquet"):
                row.unlink()
        else:  # the rows runs write when they end (`record` does it; `ls` builds the missing ones)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run([sys.executable, "-m", "tpu_perf", "ls", "--store", str(store)], env=env, check=True, capture_output=True, timeout=600)
        runs = sum(1 for p in store.iterdir() if (p / "run.json").exists())
        passes = []
        for _ in range(args.repeat):
            passes.append(one_pass(store, Path(tmp)))
            wall, server, browser = passes[-1]
            print(f"  pass: {wall:.3f} s wall, CPU: server {server:.3f} s, browser {browser:.3f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    wall, server, browser = (statistics.median(p[i] for p in passes) for i in range(3))
    label = "no index rows: every run analysed" if args.no_index else "index rows"
    print(f"cold runs page, {runs} runs ({label}), Chromium 1280 px, navigation to every number drawn: {wall:.3f} s wall = {wall / BUDGET_S:.2f} x budget ({BUDGET_S} s); CPU server {server:.3f} s + browser {browser:.3f} s; median of {len(passes)}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
