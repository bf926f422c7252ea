"""The importing process's own memory as a multi-host capture grows: `import_traces` of 4, 16 and 64
hosts (each the real TPU v6e x4 capture in tests/data, 0.86 MB, repeated `--copies` times in
time, with its own hostname).

Each import is `tpu-perf import LOGDIR` in a fresh process; its peak is that one process's
high-water mark (VmHWM, read every 20 ms until it exits: the interpreter and its imports
included), so what the engine's workers hold (other processes here, other machines on Ray) is not
in it: this is the memory of the process that drives the import.
`--before DIR` also measures the tpu-perf checkout at DIR (e.g. before job imports, which stacked
every host's tables in this process).

Run: PYTHONPATH=$PWD python bench/bench_import_memory.py [--hosts 4 16 64] [--copies 1] [--engine pool] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb"


def driver_peak(cmd: list[str], env: dict[str, str], interval_s: float = 0.02) -> tuple[float, float] | str:
    """(wall seconds, the process's own VmHWM in bytes) of `cmd`, or its last error line."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **env})
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max(peak, next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")))
        except (OSError, StopIteration):
            pass
        time.sleep(interval_s)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return ((proc.stderr.read().decode(errors="replace") if proc.stderr else "").strip().splitlines() or ["failed"])[-1]
    return wall, float(peak)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--copies", type=int, default=1, help="the capture repeated in time this many times per host file")
    ap.add_argument("--engine", default="pool")
    ap.add_argument("--before", type=Path, help="another tpu-perf checkout to measure the same way")
    args = ap.parse_args()
    from tpu_perf.traces.xplane_synth import write_pod

    sides = [("this checkout", {"PYTHONPATH": str(ROOT)}, ["--engine", args.engine])]
    if args.before:
        sides.append((f"{args.before}", {"PYTHONPATH": str(args.before)}, []))
    print(f"{'hosts':>5} {'MB':>6}  " + "  ".join(f"{name[-24:]:>34}" for name, _, _ in sides))
    for hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="tpu-perf-mem-") as tmp:
            files = write_pod(TPU, Path(tmp) / "log", hosts=hosts, copies=args.copies)
            size = sum(f.stat().st_size for f in files)
            cells = []
            for i, (_, env, extra) in enumerate(sides):
                cmd = [sys.executable, "-m", "tpu_perf", "import", str(Path(tmp) / "log"), "--store", str(Path(tmp) / f"store{i}"), *extra]
                got = driver_peak(cmd, env)
                cells.append(got if isinstance(got, str) else f"{got[0]:6.1f} s, peak {got[1] / 1e6:6.0f} MB")
            print(f"{hosts:>5} {size / 1e6:>6.0f}  " + "  ".join(f"{c:>34}" for c in cells))


if __name__ == "__main__":
    main()
