"""Shardings given to `jax.jit` itself (in_shardings / out_shardings) and numpy batches: the
arguments arrive uncommitted, so only the jit's own shardings place them. A linear-softmax
classifier, data parallel over 4 host devices. Describes its step like dp_mlp.py does."""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESH = ((4,), ("batch",))
BATCH, FEATURES, CLASSES = 256, 512, 32


def make_mesh(devices):
    """Auto axes: the jit's in/out shardings decide, as with GSPMD-style code."""
    return jax.make_mesh(*MESH, devices=devices, axis_types=(jax.sharding.AxisType.Auto,))


def jit_kwargs(mesh):
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    return {"in_shardings": (rep, split, split), "out_shardings": (rep, rep)}


def inputs():
    return ({"w": ((FEATURES, CLASSES), jnp.float32, P())}, ((BATCH, FEATURES), jnp.float32, P("batch")), ((BATCH,), jnp.int32, P("batch")))


def step(params, x, labels):
    def loss(p):
        logp = jax.nn.log_softmax(x @ p["w"])
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads), value


def main(steps: int) -> None:
    import numpy as np

    train = jax.jit(step, **jit_kwargs(make_mesh(jax.devices())))
    rng = np.random.default_rng(0)
    params = {"w": np.zeros((FEATURES, CLASSES), np.float32)}
    x = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    for _ in range(steps):
        params, value = train(params, x, labels)
    print("loss", float(value))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
