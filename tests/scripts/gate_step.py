"""A JAX step whose cost is set from the command line: a known slowdown for `tpu-perf check` tests.

Usage: gate_step.py [--steps N] [--work K] [--width W] [--clocks FILE]
Each step runs K chained W x W matmuls (inside one jitted program, so the dispatch cost stays
fixed): K=11 is a ~10 % slower step than K=10 with the same memory, inputs and fingerprint.
--clocks writes each step's wall time and the process's CPU time (every thread: XLA:CPU's workers
too) as JSON lines, the timing candidates bench/gate_noise_recorded.py measures beside wall time.
"""

import argparse
import itertools
import json
import time

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--work", type=int, default=10)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--clocks", default=None)
args = parser.parse_args()


@jax.jit
def step(w, x):
    def body(_, h):
        return jnp.tanh(h @ w) * 0.5

    h = jax.lax.fori_loop(0, args.work, body, x)
    return w - 1e-3 * h, jnp.sum(h)


w = jnp.eye(args.width) * 0.9
x = jnp.ones((args.width, args.width))
clocks = [(time.perf_counter(), time.process_time(), time.thread_time())]
for _ in range(args.steps):
    w, loss = step(w, x)
    loss.block_until_ready()
    clocks.append((time.perf_counter(), time.process_time(), time.thread_time()))
if args.clocks:
    with open(args.clocks, "w") as f:
        for (w0, p0, t0), (w1, p1, t1) in itertools.pairwise(clocks):
            f.write(json.dumps({"wall_s": w1 - w0, "process_cpu_s": p1 - p0, "main_thread_cpu_s": t1 - t0}) + "\n")
