"""Does `tpu-perf record` hold the program back? A loop with a small step and no host work, plain and recorded.

The loop dispatches a small jitted step N times and never waits for it until the end, so the host
queues steps ahead of the device as it would on a TPU; its throughput is N / (loop wall time,
including the final wait). It runs plain (`python loop.py`) and under `tpu-perf record --no-trace`,
in interleaved pairs (the order alternates), and the ratio is plain time / recorded time per pair
(1.0: recording costs nothing; under 1: the recorder slows the loop). The target is >= 0.99 for
the median pair.

By default XLA's threads run on the last core and the loop (with the recorder's threads: the
process starts on the other cores, so the flusher and the sampler, started before the script, run
there too) on the others, as a TPU host's loop runs beside a device that computes apart from it:
the ratio then measures whether the recorder holds the loop back. Each loop runs 5000 steps (1.8 s
here): at 1000 the pairs' ratios spread by +-5 %, too wide to tell 0.99 from 1. `--shared` lets XLA:CPU compute on every core,
where each microsecond of the recorder's CPU is taken from the "device" (a cost only XLA:CPU has);
the CPU per step printed last is that cost. A single-core machine runs shared.

    python bench/run_ahead.py [--pairs 6] [--steps 5000] [--width 256] [--shared]
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

LOOP = '''
import json, os, sys, time
steps, width = int(sys.argv[2]), int(sys.argv[3])
cores = [int(c) for c in sys.argv[4].split(",")] if sys.argv[4] != "shared" else []
pin = len(cores) >= 2
if pin:  # threads inherit the mask of the thread that creates them: XLA's pools start on the last core
    os.sched_setaffinity(0, {cores[-1]})
import jax, jax.numpy as jnp
jax.devices()  # the backend and its thread pools start here
if pin:  # the loop, and the threads it starts from here (a recorder's), on the other cores: a TPU host's loop beside its device
    os.sched_setaffinity(0, set(cores[:-1]))

@jax.jit
def step(w, x):
    for _ in range(4):
        x = jnp.tanh(x @ w)
    return w - 1e-4 * x.mean() * w, x

w = jnp.eye(width) * 0.5
x = jnp.ones((64, width))
for _ in range(3):
    w, x = step(w, x)
jax.block_until_ready((w, x))
t, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
for _ in range(steps):
    w, x = step(w, x)
main = time.thread_time() - main
jax.block_until_ready((w, x))
json.dump({"loop_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu, "main_cpu_s": main}, open(sys.argv[1], "w"))
'''


def run(arm: str, loop: Path, steps: int, width: int, tmp: Path, pin: bool) -> dict[str, float]:
    out = tmp / f"{arm}.json"
    cores = sorted(os.sched_getaffinity(0))
    pin = pin and len(cores) >= 2
    args = [str(out), str(steps), str(width), ",".join(map(str, cores)) if pin else "shared"]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    if arm == "plain":
        cmd = [sys.executable, str(loop), *args]
    else:
        cmd = [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(tmp / "runs"), str(loop), *args]
    # pinned, the whole process starts on the loop's cores: a recorder's threads started before the
    # script (the flusher, the sampler) run beside the loop, not on the core that stands for the device
    start_on = (lambda: os.sched_setaffinity(0, cores[:-1])) if pin else None
    subprocess.run(cmd, env=env, check=True, capture_output=True, preexec_fn=start_on)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--shared", action="store_true", help="XLA:CPU computes on every core, the recorder's among them (default: on the last core alone)")
    args = parser.parse_args()
    ratios, cpu, loop_cpu = [], {"plain": [], "record": []}, {"plain": [], "record": []}
    with tempfile.TemporaryDirectory() as tmp:
        loop = Path(tmp) / "loop.py"
        loop.write_text(LOOP)
        for i in range(args.pairs):
            times = {}
            for arm in (("plain", "record") if i % 2 == 0 else ("record", "plain")):
                got = run(arm, loop, args.steps, args.width, Path(tmp), not args.shared)
                times[arm] = got["loop_s"]
                cpu[arm].append(got["cpu_s"] / args.steps)
                loop_cpu[arm].append(got["main_cpu_s"] / args.steps)
            ratios.append(times["plain"] / times["record"])
            print(f"pair {i}: plain {times['plain'] * 1e3 / args.steps:.3f} ms/step, recorded {times['record'] * 1e3 / args.steps:.3f} ms/step, ratio {ratios[-1]:.3f}", flush=True)
    layout = "XLA on every core" if args.shared or len(os.sched_getaffinity(0)) < 2 else "XLA on its own core"
    print(f"median ratio plain/recorded over {args.pairs} pairs ({layout}): {statistics.median(ratios):.3f} (target >= 0.99); geometric mean {statistics.geometric_mean(ratios):.3f}")
    # CPU time is steadier than wall time on a shared machine: what recording adds per step, all threads and the loop's own
    extra = (statistics.median(cpu["record"]) - statistics.median(cpu["plain"])) * 1e6
    extra_main = (statistics.median(loop_cpu["record"]) - statistics.median(loop_cpu["plain"])) * 1e6
    print(f"process CPU per step: plain {statistics.median(cpu['plain']) * 1e6:.0f} us, recorded {statistics.median(cpu['record']) * 1e6:.0f} us (+{extra:.0f} us); loop thread {statistics.median(loop_cpu['plain']) * 1e6:.0f} us plain, +{extra_main:.0f} us recorded")


if __name__ == "__main__":
    main()
