"""Data-parallel JAX over processes (jax.distributed, gloo collectives on CPU): the gradient mean
is a cross-process all-reduce inside the jitted step. Usage: jax_spmd.py STEPS SLOW_RANK SLOW_S,
with PROCESS_ID and COORDINATOR in the environment; SLOW_RANK does SLOW_S of host work per step."""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

steps, slow_rank, slow_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rank = int(os.environ["PROCESS_ID"])
jax.distributed.initialize(coordinator_address=os.environ["COORDINATOR"], num_processes=2, process_id=rank)
mesh = jax.make_mesh((jax.device_count(),), ("batch",))
rows, replicated = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())


def loss_fn(w, x):
    return jnp.mean((jnp.tanh(x @ w) - x) ** 2)


@jax.jit
def train_step(w, x):
    loss, grad = jax.value_and_grad(loss_fn)(w, x)
    return w - 0.01 * grad, loss


w = jax.device_put(jnp.eye(128), replicated)
rng = np.random.default_rng(rank)
for step in range(steps):
    if rank == slow_rank:
        time.sleep(slow_s)  # a slower input pipeline on this host
    x = jax.make_array_from_process_local_data(rows, rng.standard_normal((32, 128), dtype=np.float32))
    w, loss = train_step(w, x)
    if step % 5 == 0:
        print(f"rank {rank} step {step} loss {float(loss):.4f}", flush=True)
jax.distributed.shutdown()
