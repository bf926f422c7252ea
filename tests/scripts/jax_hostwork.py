"""A JAX loop as people write it: host input work before each step, `float(loss)` after it, a log
line now and then. It times its own iterations with a wall clock, for comparison with tpu-perf.

Usage: jax_hostwork.py OUT_JSON [--steps N] [--host-ms MS] [--width W]
       [--sync float|device_get|print|none] [--mark auto|annotation|explicit]
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--host-ms", type=float, default=50.0)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--sync", default="float")
parser.add_argument("--mark", default="auto")
args = parser.parse_args()


def batches(rng: np.random.Generator):
    """The input pipeline: decode/augment on the host (here: numpy work, then waiting on I/O)."""
    while True:
        t = time.perf_counter()
        x = rng.standard_normal((32, args.width)).astype(np.float32)
        x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)
        time.sleep(max(0.0, args.host_ms / 1e3 - (time.perf_counter() - t)))
        yield x


def loss_fn(params, x):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - x) ** 2)


@jax.jit
def update(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), loss


key1, key2 = jax.random.split(jax.random.PRNGKey(0))
params = {"w1": jax.random.normal(key1, (args.width, args.width)) * 0.05, "w2": jax.random.normal(key2, (args.width, args.width)) * 0.05}
data = batches(np.random.default_rng(0))
starts = []
losses = []


def train(params, x, step):
    """One step as the script marks it (or not); returns the new params and the loss."""
    if args.mark == "annotation":
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            return update(params, x)
    if args.mark == "explicit":
        import tpu_perf

        tpu_perf.step(step)
    return update(params, x)


for step in range(args.steps):
    x = next(data)
    starts.append(time.perf_counter())  # the iteration's clock: one step call to the next
    params, loss = train(params, x, step)
    if args.sync == "float":
        losses.append(float(loss))
        if step % 10 == 0:
            print(f"step {step} loss {losses[-1]:.4f}")
    elif args.sync == "device_get":
        losses.append(jax.device_get({"loss": loss})["loss"].item())
    elif args.sync == "print":
        print("loss", loss)
iterations = [b - a for a, b in zip(starts, starts[1:], strict=False)]
with open(args.out, "w") as f:
    json.dump({"iteration_s": iterations, "steps": args.steps}, f)
