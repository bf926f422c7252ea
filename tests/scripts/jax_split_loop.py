"""A JAX loop for the step split: host work before each step, a jitted update, and no sync.

Host work: `sleep` (a storage wait), `numpy` (augmentation that keeps the host busy), or `none`
(the host queues steps ahead of the device). The model is `--layers` tanh layers, optionally under
`lax.scan` and `jax.checkpoint`. After the loop the script measures the step's device-only time
itself (a second jitted copy, dispatched and waited for), and writes the truth to OUT_JSON:
its median iteration, the device-only time and the off-device share of the iteration.

Usage: jax_split_loop.py OUT_JSON [--steps N] [--host sleep|numpy|none] [--host-ms MS]
       [--width W] [--layers L] [--scan] [--remat]
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=14)
parser.add_argument("--host", default="sleep", choices=("sleep", "numpy", "none"))
parser.add_argument("--host-ms", type=float, default=30.0)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--scan", action="store_true")
parser.add_argument("--remat", action="store_true")
args = parser.parse_args()
rng = np.random.default_rng(0)


def batch() -> np.ndarray:
    start = time.perf_counter()
    x = rng.standard_normal((64, args.width)).astype(np.float32)
    if args.host == "sleep":
        time.sleep(args.host_ms / 1e3)
    elif args.host == "numpy":
        while time.perf_counter() - start < args.host_ms / 1e3:
            x = np.tanh(x[:, ::-1] * 1.01 + 0.1)
            x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return x.astype(np.float32)


def layer(h, w):
    return jnp.tanh(h @ w), None


def loss_fn(ws, x):
    f = jax.checkpoint(layer) if args.remat else layer
    if args.scan:
        h, _ = jax.lax.scan(f, x, ws)
    else:
        h = x
        for i in range(args.layers):
            h, _ = f(h, ws[i])
    return jnp.mean((h - x) ** 2)


def update_fn(ws, x):
    loss, grads = jax.value_and_grad(loss_fn)(ws, x)
    return ws - 1e-3 * grads, loss


update = jax.jit(update_fn)
probe = jax.jit(update_fn)  # the same program, for the device-only measurement after the loop
ws = jax.random.normal(jax.random.PRNGKey(0), (args.layers, args.width, args.width)) * 0.03
iterations = []
for _ in range(args.steps):
    t = time.perf_counter()
    x = batch()
    ws, loss = update(ws, x)
    iterations.append(time.perf_counter() - t)
jax.block_until_ready(ws)
x = rng.standard_normal((64, args.width)).astype(np.float32)
device = []
for _ in range(10):
    t = time.perf_counter()
    jax.block_until_ready(probe(ws, x))
    device.append(time.perf_counter() - t)
iteration, device_only = float(np.median(iterations[2:])), float(np.median(device))
truth = {"iteration_median_s": iteration, "device_only_s": device_only, "off_device_truth": 1 - device_only / iteration}
with open(args.out, "w") as f:
    json.dump(truth, f)
print(truth)
