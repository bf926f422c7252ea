"""A tiny JAX training loop with advisor defects switched on or off, for the advisor's tests.

    advise_defects.py --mode defective   # host-sync, recompilation, no-donation, unrolled-loop, input-bound (after step 8)
    advise_defects.py --mode eager       # op-by-op: the same step, not jitted (steps marked by annotation)
    advise_defects.py --mode fixed       # the fixed twin of both: none of them
"""

import argparse
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["defective", "eager", "fixed"], required=True)
parser.add_argument("--steps", type=int, default=16)
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--width", type=int, default=512)
args = parser.parse_args()
defective = args.mode == "defective"


def loss_fn(params, x):
    if args.mode == "fixed":  # one layer body, looped by XLA
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, params)
    else:  # a Python loop: the layer is inlined once per layer
        h = x
        for i in range(args.layers):
            h = jnp.tanh(h @ params[i])
    return jnp.mean(h**2)


def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return params - 0.01 * grads, loss


if args.mode == "eager":
    step_fn = train_step
elif defective:
    step_fn = jax.jit(train_step)
else:
    step_fn = jax.jit(train_step, donate_argnums=0)

params = jax.random.normal(jax.random.PRNGKey(0), (args.layers, args.width, args.width)) / np.sqrt(args.width)
rng = np.random.default_rng(0)
ready = [jnp.asarray(rng.standard_normal((256, args.width)).astype(np.float32)) for _ in range(args.steps)] if not defective else None
for step in range(args.steps):
    if defective:  # a slow host input pipeline, in the loop, while the device waits; a new batch shape every step from step 8
        rows = 256 if step < 8 else 256 + 8 * (step - 7)
        x = jnp.asarray(rng.standard_normal((rows, args.width)).astype(np.float32))
        time.sleep(0.08)
    else:  # batches prepared on the device ahead of the loop
        x = ready[step]
    with jax.profiler.StepTraceAnnotation("train", step_num=step) if args.mode == "eager" else contextlib.nullcontext():
        params, loss = step_fn(params, x)
        if args.mode != "fixed":
            print(f"step {step} loss {float(loss):.4f}")  # a device-to-host fetch every step
print(f"final loss {float(loss):.4f}")
