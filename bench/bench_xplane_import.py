"""xplane import time: tpu-perf's tables against XProf's own conversion of the same capture.

The capture is the real TPU v6e x4 xplane in tests/data (or a path given). Each measurement runs in
its own subprocess, timed from after its imports, on a fresh scratch copy (XProf caches converted
data next to the file it reads, so a reused copy would flatter later runs):
- tpu-perf: `read_xspace`, all four tables (FLOPs/bytes from the ops' own metadata stats);
  its modules are imported before the clock starts, as XProf's are;
- xprof <tool>: `xprof.convert.raw_to_tool_data.xspace_to_tool_data` for one tool;
- xprof 3 tools: op_profile, hlo_stats and overview_page one after another on one copy, the
  conversions that give what tpu-perf's tables hold (per-op time/FLOPs, steps).

Run: PYTHONPATH=$PWD python bench/bench_xplane_import.py [--repeat 5] [xplane.pb]
"""

from __future__ import annotations

import argparse
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


def measure(name: str, path: Path) -> tuple[float, float] | str:
    setup, run = LOADERS[name]
    return subprocess_measure.measure(setup, run, path, env={"JAX_PLATFORMS": "cpu"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", type=Path, default=TPU)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    size = args.path.stat().st_size
    print(f"xplane: {args.path.name}, {size / 1e6:.2f} MB, {args.repeat} runs each, medians")
    med: dict[str, float] = {}
    for name in LOADERS:
        runs = [measure(name, args.path) for _ in range(args.repeat)]
        ok = [r for r in runs if not isinstance(r, str)]
        if not ok:
            print(f"{name:20s} failed: {runs[0]}")
            continue
        med[name] = statistics.median(r[0] for r in ok)
        peak = statistics.median(r[1] for r in ok)
        print(f"{name:20s} {med[name]:6.2f} s  peak +{peak / 1e6:6.0f} MB   (runs: {', '.join(f'{r[0]:.2f}s' for r in ok)})")
    if "tpu-perf" in med:
        for ref in ("xprof 3 tools", "xprof op_profile"):
            if ref in med:
                print(f"tpu-perf tables vs {ref}: {med[ref] / med['tpu-perf']:.2f}x the speed")


if __name__ == "__main__":
    main()
