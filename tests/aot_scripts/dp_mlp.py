"""Data-parallel MLP: plain `jax.jit`, NamedSharding on the arguments (params replicated, batch split).

The module describes its step (`step`, `jit_kwargs`, `make_mesh`, `inputs`) (and `make_mesh`) so a test can compile the
very same step for a TPU slice by hand; `python dp_mlp.py STEPS` trains it on the host devices.
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESH = ((4,), ("data",))
BATCH, D_IN, D_HIDDEN, D_OUT = 128, 256, 1024, 64


def jit_kwargs(mesh):
    return {"donate_argnums": (0,)}


def make_mesh(devices):
    """jax.make_mesh (explicit axes by default in jax 0.10) over `devices`."""
    return jax.make_mesh(*MESH, devices=devices)


def inputs():
    """(shape, dtype, PartitionSpec) per argument of `step`, as a pytree like its arguments."""
    params = {"w1": ((D_IN, D_HIDDEN), jnp.float32, P()), "b1": ((D_HIDDEN,), jnp.float32, P()), "w2": ((D_HIDDEN, D_OUT), jnp.float32, P())}
    return (params, ((BATCH, D_IN), jnp.float32, P("data")), ((BATCH, D_OUT), jnp.float32, P("data")))


def step(params, x, y):
    def loss(p):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads)


def main(steps: int) -> None:
    from jax.sharding import NamedSharding

    mesh = make_mesh(jax.devices())
    train = jax.jit(step, **jit_kwargs(mesh))
    key = jax.random.key(0)

    def make(spec):
        shape, dtype, pspec = spec
        return jax.device_put(jax.random.normal(key, shape, dtype) * 0.02, NamedSharding(mesh, pspec))

    params, x, y = jax.tree.map(make, inputs(), is_leaf=lambda s: isinstance(s, tuple) and len(s) == 3 and isinstance(s[2], P))
    for _ in range(steps):
        params = train(params, x, y)
    jax.block_until_ready(params)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
