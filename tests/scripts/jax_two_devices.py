"""A jitted step sharded over every device the process sees (run with
XLA_FLAGS=--xla_force_host_platform_device_count=2 for two): a run whose device count is not its
chip count when recorded with `--chip ironwood` (2 devices per chip).

Usage: jax_two_devices.py [--steps N]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
mesh = Mesh(np.array(jax.devices()), ("data",))
rows = NamedSharding(mesh, PartitionSpec("data", None))


@jax.jit
def step(w, x):
    h = jnp.tanh(x @ w)
    return w - 1e-3 * (h.T @ h), jnp.sum(h)


w = jnp.eye(128) * 0.9
x = jax.device_put(jnp.ones((64 * len(jax.devices()), 128)), rows)
for _ in range(args.steps):
    w, loss = step(w, x)
    float(loss)
