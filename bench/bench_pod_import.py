"""Pod-scale xplane import: `tpu-perf import` of a multi-host log dir against XProf's own conversion.

The log dir holds one `.xplane.pb` per host (default 16 hosts, 1 GB in all), each the real TPU v6e
x4 capture in tests/data repeated in time with its own hostname (tpu_perf/traces/xplane_synth.py),
or a log dir you give. Each side runs in its own subprocess, start-up included, and its peak is the
proportional set size (PSS) of its whole process tree, sampled every 50 ms
(bench/subprocess_measure.py: forked workers share pages, so PSS, not a sum of RSS):
- tpu-perf: `tpu-perf import LOGDIR --store SCRATCH` (reads hosts in parallel processes, writes
  the run, copies the trace files into it);
- XProf: `xprof.convert.raw_to_tool_data.xspace_to_tool_data` over all host files for op_profile,
  hlo_stats and overview_page one after another (the conversions that give what tpu-perf's tables
  hold), on a scratch copy made before its clock starts (XProf writes caches next to its input).

- tpu-perf on Ray: `tpu-perf import LOGDIR --engine ray`, a local Ray cluster started for the
  import (its start-up is in the wall time), one Ray task per host file; skipped without Ray.

Prints wall ours/XProf (pass: <= 1.5) and our peak / total file size (pass: <= 2), and PASS/FAIL.
`--no-xprof` prints our rows only (no verdict).

Run: PYTHONPATH=$PWD python bench/bench_pod_import.py [--size-mb 1024] [--hosts 16] [--logdir DIR] [--no-xprof]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import subprocess_measure  # bench/ is sys.path[0] when a bench runs as a script

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb"
XPROF = """import sys
from xprof.convert import raw_to_tool_data as rtd
files = sys.argv[1:]
for tool in ("op_profile", "hlo_stats", "overview_page"):
    rtd.xspace_to_tool_data(files, tool, {"group_by": "program"} if tool == "op_profile" else {})
"""
WALL_MAX, MEMORY_MAX = 1.5, 2.0


def build(out: Path, size_mb: float, hosts: int) -> list[Path]:
    from tpu_perf.traces.xplane_synth import write_pod

    copies = max(1, round(size_mb * 1e6 / hosts / TPU.stat().st_size))
    return write_pod(TPU, out, hosts=hosts, copies=copies)


def _row(result: tuple[float, float] | str) -> str:
    return result if isinstance(result, str) else f"{result[0]:6.1f} s  peak {result[1] / 1e6:6.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=float, default=1024, help="total size of the built log dir (default 1024)")
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--logdir", type=Path, help="a multi-host log dir to use instead of building one")
    ap.add_argument("--no-xprof", action="store_true", help="time tpu-perf's engines only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpu-perf-pod-") as tmp:
        tmp_path = Path(tmp)
        if args.logdir:
            from tpu_perf.traces.ingest import find_traces

            files = find_traces(args.logdir)[0]
            logdir = args.logdir
        else:
            logdir = tmp_path / "log"
            files = build(logdir, args.size_mb, args.hosts)
        total = sum(f.stat().st_size for f in files)
        print(f"log dir: {len(files)} host files, {total / 1e6:.0f} MB")
        ours = subprocess_measure.measure_tree([sys.executable, "-m", "tpu_perf", "import", str(logdir), "--store", str(tmp_path / "store")])
        print(f"tpu-perf import : {_row(ours)}")
        shutil.rmtree(tmp_path / "store", ignore_errors=True)
        if importlib.util.find_spec("ray") is not None:
            on_ray = subprocess_measure.measure_tree([sys.executable, "-m", "tpu_perf", "import", str(logdir), "--store", str(tmp_path / "store"), "--engine", "ray"])
            print(f"  --engine ray  : {_row(on_ray)}")
            shutil.rmtree(tmp_path / "store", ignore_errors=True)
        if args.no_xprof:
            return
        scratch = tmp_path / "xprof"
        copies = []
        for i, f in enumerate(files):
            dest = scratch / f"h{i}" / f.name
            dest.parent.mkdir(parents=True)
            shutil.copyfile(f, dest)
            copies.append(str(dest))
        theirs = subprocess_measure.measure_tree([sys.executable, "-c", XPROF, *copies])
        print(f"xprof 3 tools   : {_row(theirs)}")
    if isinstance(ours, str) or isinstance(theirs, str):
        print("FAIL: a side did not finish")
        return
    wall, memory = ours[0] / theirs[0], ours[1] / total
    print(f"wall ours/XProf: {wall:.2f}x (max {WALL_MAX}x)   memory ours/files: {memory:.2f}x (max {MEMORY_MAX}x)   "
          f"XProf's memory/files: {theirs[1] / total:.2f}x")
    print("PASS" if wall <= WALL_MAX and memory <= MEMORY_MAX else "FAIL")


if __name__ == "__main__":
    main()
