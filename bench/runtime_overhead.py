"""Sampler overhead on a training loop: prints (loop time with sampling) / (loop time without) - 1.

The loop is a real jitted JAX step (CPU here; the host side of a TPU loop is the same Python).
The metric service is the loopback RuntimeMetricService of tests/metric_server.py in a separate
process, as libtpu's lives outside the Python interpreter. Conditions run interleaved, in rotating
order, for several rounds; each ratio is of medians over rounds.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python bench/runtime_overhead.py [--rounds 7] [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_step():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):
        loss = lambda w: jnp.mean((jnp.tanh(x @ w) @ w.T - x) ** 2)  # noqa: E731
        return w - 1e-3 * jax.grad(loss)(w)

    w, x = jnp.ones((256, 256)) * 0.01, jnp.ones((128, 256))
    step(w, x).block_until_ready()
    return step, w, x


def run_loop(step, w, x, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        w = step(w, x)
        w.block_until_ready()
    return time.perf_counter() - t


def timed(condition: str | float | None, addr: str, step, w, x, steps: int, store: str) -> tuple[float, float | None]:
    """Loop time under one condition, and the sampler's CPU seconds per sample."""
    if condition is None:
        return run_loop(step, w, x, steps), None
    from tpu_perf.collectors.session import Recorder, RecordOptions
    from tpu_perf.store import RunWriter

    interval = 1e6 if condition == "recorder-only" else float(condition)
    writer = RunWriter.create(store, {"name": "bench"})
    rec = Recorder(writer, RecordOptions(trace_steps=None, sample_interval_s=interval, tpu_metrics_addr=addr, progress=False), log=lambda line: None)
    rec.start()
    elapsed = run_loop(step, w, x, steps)
    rec.finish()
    writer.finish("completed", 0)
    samples = rec.sampler.samples
    return elapsed, (rec.sampler.cpu_s / samples if samples else None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=1.0, help="loop length per condition and round")
    parser.add_argument("--intervals", default="1.0,0.01")
    args = parser.parse_args()
    from tpu_perf.collectors.sampler import DEFAULT_SAMPLE_INTERVAL_S

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "metric_server.py"), "4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    addr = server.stdout.readline().strip()
    step, w, x = make_step()
    per_step = run_loop(step, w, x, 50) / 50
    steps = max(10, int(args.seconds / per_step))
    conditions: list[str | float] = ["recorder-only", *[float(i) for i in args.intervals.split(",")]]
    ratios: dict[object, list[float]] = {c: [] for c in conditions}
    cpu: dict[object, list[float]] = {c: [] for c in conditions}
    store = tempfile.mkdtemp(prefix="tpu-perf-bench-")
    try:
        for r in range(args.rounds):
            for c in conditions:  # paired with a baseline run next to it, in alternating order
                pair = [None, c] if r % 2 == 0 else [c, None]
                results = {k: timed(k, addr, step, w, x, steps, store) for k in pair}
                ratios[c].append(results[c][0] / results[None][0])
                if results[c][1] is not None:
                    cpu[c].append(results[c][1])
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    loop_s = steps * per_step
    print(f"loop: {steps} steps of {per_step * 1e3:.2f} ms (~{loop_s:.1f} s), {args.rounds} rounds, each paired with a loop without recorder; metric service at {addr} (4 devices)")
    print(f"{'condition':<30}{'median ratio - 1':>17}{'sampler CPU/sample':>20}{'CPU/sample / interval':>23}")
    for c in conditions:
        label = "recorder, no sampling" if c == "recorder-only" else f"sampling every {c:g} s" + (" (default)" if c == DEFAULT_SAMPLE_INTERVAL_S else "")
        per_sample = statistics.median(cpu[c]) if cpu[c] else None
        bound = f"{per_sample / c * 100:.3f}%" if (per_sample and c != "recorder-only") else ""
        print(f"{label:<30}{(statistics.median(ratios[c]) - 1) * 100:>16.2f}%{(f'{per_sample * 1e3:.3f} ms' if per_sample else ''):>20}{bound:>23}")
    print("ratio: loop wall time with the recorder over the paired loop without (median over rounds);")
    print("CPU/sample / interval: the sampler thread's CPU share, the most it can take from a loop that holds the GIL")


if __name__ == "__main__":
    main()
