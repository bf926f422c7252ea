"""Data-parallel training on a jax.sharding mesh: batch sharded over the 'data' axis, parameters
replicated, one jitted step with donated state (the jax.sharding tutorial's pattern). Batches are
slices of a dataset held in memory, put on the mesh each step. An orbax checkpoint every 10 steps:
orbax compiles a slice of each replicated array at every save (its own code, not a recompile)."""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("data",))
replicated, batch_sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
rng = np.random.default_rng(0)
params = jax.device_put({"w1": rng.normal(size=(64, 256)).astype(np.float32) * 0.1, "w2": rng.normal(size=(256, 1)).astype(np.float32) * 0.1}, replicated)


def loss_fn(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2)


def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads), loss


train_step = jax.jit(train_step, donate_argnums=0)
data_x = rng.normal(size=(40 * 256, 64)).astype(np.float32)
data_y = data_x[:, :1] * 2.0
checkpointer, ckpt_dir = ocp.StandardCheckpointer(), tempfile.mkdtemp()
for step in range(40):
    batch = slice(step * 256, (step + 1) * 256)
    x, y = jax.device_put((data_x[batch], data_y[batch]), batch_sharded)
    params, loss = train_step(params, x, y)
    if step % 10 == 0:
        print(step, float(loss))
    if step % 10 == 9:
        checkpointer.save(os.path.join(ckpt_dir, f"step_{step}"), params)
checkpointer.wait_until_finished()
