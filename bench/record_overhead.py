"""Overhead of `tpu-perf record` on the training loop (trace window off).

Runs the same script plain (`python script`) and under `tpu-perf record --no-trace`, interleaved,
several times. The script times its own steps with a device sync; we compare the medians of those
self-measured step times (compile steps dropped), so both arms are measured the same way.

    python bench/record_overhead.py [--repeats 11] [--steps 150] [--width 1024] [--script tests/scripts/jax_selftimed.py]

Prints one line per repeat and the ratio record/plain of the median step times; the target is <= 1.02.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(arm: str, script: Path, steps: int, width: int, tmp: Path) -> float:
    out = tmp / f"{arm}.json"
    script_args = [str(out), "--steps", str(steps), "--width", str(width)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    if arm == "plain":
        cmd = [sys.executable, str(script), *script_args]
    else:
        cmd = [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(tmp / "runs"), str(script), *script_args]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    times = json.loads(out.read_text())["step_times_s"]
    return statistics.median(times[5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--script", type=Path, default=ROOT / "tests" / "scripts" / "jax_selftimed.py")
    args = parser.parse_args()
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for arm in (("plain", "record") if i % 2 == 0 else ("record", "plain")):
                median = run(arm, args.script, args.steps, args.width, Path(tmp))
                (plain if arm == "plain" else recorded).append(median)
            print(f"repeat {i}: plain {plain[-1] * 1e3:.3f} ms  record {recorded[-1] * 1e3:.3f} ms  ratio {recorded[-1] / plain[-1]:.3f}")
    ratio = statistics.median(recorded) / statistics.median(plain)
    paired = statistics.median(r / p for r, p in zip(recorded, plain, strict=True))
    print(f"median step time: plain {statistics.median(plain) * 1e3:.3f} ms, record {statistics.median(recorded) * 1e3:.3f} ms")
    print(f"ratio record/plain: {ratio:.3f} (median of paired ratios {paired:.3f}; target <= 1.02)")
    print("Separate processes differ by several percent on a 2-core machine: read the ratio over many repeats.")


if __name__ == "__main__":
    main()
