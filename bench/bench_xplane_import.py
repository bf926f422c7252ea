"""xplane import time: tpu-perf's tables against XProf's own conversion of the same capture.

The capture is the real TPU v6e x4 xplane in tests/data (or a path given). Each measurement runs in
its own subprocess, timed from after its imports, on a fresh scratch copy (XProf caches converted
data next to the file it reads, so a reused copy would flatter later runs):
- tpu-perf: `read_xspace`, all four tables (FLOPs/bytes from the ops' own metadata stats);
  its modules are imported before the clock starts, as XProf's are;
- xprof <tool>: `xprof.convert.raw_to_tool_data.xspace_to_tool_data` for one tool;
- xprof 3 tools: op_profile, hlo_stats and overview_page one after another on one copy, the
  conversions that give what tpu-perf's tables hold (per-op time/FLOPs, steps).

The loaders take turns within each repeat (the order rotating), so a machine whose load changes
weighs on all of them alike; the load average is printed before and after. Each run gives its wall
time, its CPU time (all threads: XProf converts on several) and its peak memory; the ratios are of
medians. A large synthetic capture: `python -m tpu_perf.traces.xplane_synth SRC OUT --mb 100`.

Run: PYTHONPATH=$PWD python bench/bench_xplane_import.py [--repeat 5] [--loaders tpu-perf,"xprof 3 tools"] [xplane.pb]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import subprocess_measure  # bench/ is sys.path[0] when a bench runs as a script

TPU = Path(__file__).resolve().parents[1] / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb"
XPROF = ("from xprof.convert import raw_to_tool_data as rtd; from tpu_perf.traces.xprof_tools import scratch_copies\n"
         "def run(tools):\n"
         "    with scratch_copies([P]) as copies:\n"
         "        for tool in tools:\n"
         "            rtd.xspace_to_tool_data(copies, tool, {'group_by': 'program'} if tool == 'op_profile' else {})\n")
TOOLS = ("op_profile", "hlo_stats", "overview_page")
LOADERS = {
    "tpu-perf": ("from tpu_perf.traces.xspace import read_xspace", "t = read_xspace([P])"),
    **{f"xprof {t}": (XPROF, f"run([{t!r}])") for t in TOOLS},
    "xprof 3 tools": (XPROF, f"run({list(TOOLS)!r})"),
}


def measure(name: str, path: Path) -> tuple[float, float, float] | str:
    setup, run = LOADERS[name]
    return subprocess_measure.measure_cpu(setup, run, path, env={"JAX_PLATFORMS": "cpu"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", type=Path, default=TPU)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated, of: " + ", ".join(LOADERS))
    args = ap.parse_args()
    names = [n.strip() for n in args.loaders.split(",") if n.strip() in LOADERS]
    size = args.path.stat().st_size
    print(f"xplane: {args.path.name}, {size / 1e6:.2f} MB, {args.repeat} runs each (loaders in turn), medians; load average {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[tuple[float, float, float] | str]] = {n: [] for n in names}
    for r in range(args.repeat):
        for name in names[r % len(names):] + names[: r % len(names)]:
            runs[name].append(measure(name, args.path))
    med: dict[str, tuple[float, float, float]] = {}
    for name in names:
        ok = [x for x in runs[name] if not isinstance(x, str)]
        if not ok:
            print(f"{name:20s} failed: {runs[name][0]}")
            continue
        med[name] = (statistics.median(x[0] for x in ok), statistics.median(x[1] for x in ok), statistics.median(x[2] for x in ok))
        wall, cpu, peak = med[name]
        print(f"{name:20s} {wall:7.3f} s wall  {cpu:7.3f} s CPU  peak +{peak / 1e6:6.0f} MB   (wall: {', '.join(f'{x[0]:.3f}' for x in ok)})")
    if "tpu-perf" in med:
        ours = med["tpu-perf"]
        for ref in ("xprof 3 tools", "xprof op_profile"):
            if ref in med:
                theirs = med[ref]
                print(f"tpu-perf vs {ref}: {theirs[0] / ours[0]:.2f}x the speed (wall), {theirs[1] / ours[1]:.2f}x (CPU), peak {ours[2] / theirs[2]:.2f}x theirs")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
