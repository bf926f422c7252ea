"""A synced JAX loop whose train state has many arrays; it counts the Python functions each thread
runs during its steady steps (sys.setprofile: calls, not time) and writes them per step.

Usage: jax_hook_work.py OUT_JSON [--steps N] [--leaves L]
"""

import argparse
import collections
import json
import sys
import threading
import time

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--leaves", type=int, default=64)
args = parser.parse_args()

counting = False  # the loop's thread: its steady steps
watching = False  # the recorder's threads: from the first steady step until the watcher has handed over as many calls
calls: collections.Counter[tuple[str, str]] = collections.Counter()


def count(frame, event, arg):  # Python-level calls only: C calls (isinstance over the leaves) are not the hook's Python work
    if event == "call" and (counting if threading.current_thread() is threading.main_thread() else watching):
        calls[(threading.current_thread().name, f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}")] += 1


threading.setprofile(count)  # threads started from here on (the recorder's ready watcher starts at the first call)
sys.setprofile(count)


@jax.jit
def train_step(params, lr):
    new = jax.tree_util.tree_map(lambda p: p - lr * p, params)
    return new, sum(jnp.sum(p) for p in new.values())


params = {f"w{i}": jnp.ones((4,)) for i in range(args.leaves)}
lr = jnp.float32(1e-3)
for _ in range(10):  # compile, step detection
    params, loss = train_step(params, lr)
    float(loss)
counting = watching = True
for _ in range(args.steps):
    params, loss = train_step(params, lr)
    float(loss)  # the loop syncs every step, as most do (logging the loss)
counting = False
# On a loaded machine the watcher can run behind the loop (the sync stamps the steps meanwhile):
# its work for these steps is counted when it does it, not only while the loop ran.
deadline = time.monotonic() + 20
while calls[("tpu-perf-ready", "jit.py:_finished")] < args.steps and time.monotonic() < deadline:
    time.sleep(0.01)
watching = False
sys.setprofile(None)
threading.setprofile(None)
per_thread: dict[str, dict[str, float]] = collections.defaultdict(dict)
for (thread, fn), n in calls.items():
    per_thread[thread][fn] = n / args.steps
json.dump({"steps": args.steps, "leaves": args.leaves, "calls_per_step": per_thread}, open(args.out, "w"), indent=1)
