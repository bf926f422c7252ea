"""A JAX loop for the step split: an input pipeline before each step, a jitted update, and no sync.

Input (`--host`), each about `--host-ms` per batch:
- `sleep`: a storage wait on the loop's thread;
- `numpy`: augmentation in numpy that keeps the host busy;
- `queue`: a prefetch thread reads (waits) and fills a queue the loop blocks on;
- `generator`: tf.data-like stages chained as generators: read (a wait), then decode and
  normalise in numpy (a sixth of the time);
- `none`: no input work (the host queues steps ahead of the device).
The model is `--layers` tanh layers, optionally under `lax.scan` and `jax.checkpoint`.

The script writes its own truth to OUT_JSON: the median iteration, and the step's device-only time
(a second jitted copy of the update, dispatched and waited for one call at a time, 8 times before
the loop and 8 after; the median of all 16, the two halves given too), and the off-device share of
the iteration that follows. `--pin` runs XLA's threads on core 1 and the loop on core 0 (Linux,
two or more cores): the device then does not share its core with the host's own work, as a TPU
does not; without it, numpy augmentation and XLA:CPU compete for the same cores.

Usage: jax_split_loop.py OUT_JSON [--steps N] [--host sleep|numpy|queue|generator|none]
       [--host-ms MS] [--width W] [--layers L] [--scan] [--remat] [--pin] [--sync-every N] [--donate]
"""

import argparse
import json
import os
import queue
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=14)
parser.add_argument("--host", default="sleep", choices=("sleep", "numpy", "queue", "generator", "none"))
parser.add_argument("--host-ms", type=float, default=30.0)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--scan", action="store_true")
parser.add_argument("--remat", action="store_true")
parser.add_argument("--pin", action="store_true")
parser.add_argument("--sync-every", type=int, default=0, help="read the loss every N steps (0: never), as loops that log do")
parser.add_argument("--donate", action="store_true", help="donate the train state (a step count, the weights) to the update, as optimizers' steps do")
args = parser.parse_args()
pin = args.pin and len(os.sched_getaffinity(0)) >= 2
if pin:  # threads inherit the mask of the thread that creates them: XLA's pools start on core 1
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[1]})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
wait_s = args.host_ms / 1e3


def augment(x: np.ndarray, seconds: float) -> np.ndarray:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        x = np.tanh(x[:, ::-1] * 1.01 + 0.1)
        x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return x


def raw() -> np.ndarray:
    return rng.standard_normal((64, args.width)).astype(np.float32)


def batch() -> np.ndarray:
    if args.host == "sleep":
        time.sleep(wait_s)
    x = raw()
    if args.host == "numpy":
        x = augment(x, wait_s)
    return x.astype(np.float32)


def prefetched():
    q: queue.Queue = queue.Queue(maxsize=2)

    def fill() -> None:
        while True:
            time.sleep(wait_s)  # the read
            q.put(raw())

    threading.Thread(target=fill, daemon=True).start()
    while True:
        yield q.get()


def pipeline():
    def read():
        while True:
            time.sleep(wait_s * 5 / 6)
            yield raw()

    def decode(xs):
        for x in xs:
            yield augment(x, wait_s / 6).astype(np.float32)

    yield from decode(read())


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


def train_step(state, x):
    """The update on a train state whose first leaf is a scalar step count (optax's, jax_transformer's)."""
    count, ws = state
    ws, loss = update_fn(ws, x)
    return (count + 1, ws), loss


update = jax.jit(train_step, donate_argnums=(0,) if args.donate else ())
probe = jax.jit(update_fn)  # the same program, for the device-only measurement
ws = jax.random.normal(jax.random.PRNGKey(0), (args.layers, args.width, args.width)) * 0.03
count = jnp.zeros((), jnp.int32)
x0 = raw()


def device_only(n: int = 8) -> list[float]:
    jax.block_until_ready(probe(ws, x0))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(probe(ws, x0))
        times.append(time.perf_counter() - t)
    return times


before = device_only()
if pin:
    os.sched_setaffinity(0, {cores[0]})
source = prefetched() if args.host == "queue" else pipeline() if args.host == "generator" else None
iterations = []
steady_from = None
for i in range(args.steps):
    t = time.perf_counter()
    if i == 2:
        steady_from = t
    x = next(source) if source is not None else batch() if args.host != "none" else x0
    (count, ws), loss = update((count, ws), x)
    if args.sync_every and i % args.sync_every == 0:
        print(f"step {i} loss {float(loss):.4f}")
    iterations.append(time.perf_counter() - t)
jax.block_until_ready(ws)
wall_per_step = (time.perf_counter() - steady_from) / (args.steps - 2)
after = device_only()
iteration, device = float(np.median(iterations[2:])), float(np.median(before + after))
truth = {
    "iteration_median_s": iteration, "device_only_s": device, "off_device_truth": 1 - device / iteration,
    "wall_per_step_s": wall_per_step, "device_only_before_s": float(np.median(before)), "device_only_after_s": float(np.median(after)),
    "device_only_min_s": float(min(before + after)), "pinned": pin,
}
with open(args.out, "w") as f:
    json.dump(truth, f)
print(truth)
