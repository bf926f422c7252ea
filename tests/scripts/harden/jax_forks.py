"""A JAX loop that forks: a bare os.fork() child ending in sys.exit(0), and spawn/forkserver pools
(JAX warns that a fork-started pool can deadlock; see tests/torch_scripts/harden/fork_loader.py)."""

import multiprocessing as mp
import os
import sys

import jax
import jax.numpy as jnp


def square(x: int) -> int:
    return x * x


@jax.jit
def train_step(w, x):
    loss = jnp.mean((x @ w) ** 2)
    return w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w), loss


if __name__ == "__main__":
    steps = int(sys.argv[1])
    w, x = jnp.ones((32, 32)), jnp.ones((8, 32))
    for i in range(steps):
        w, loss = train_step(w, x)
        if i == 2:
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # the child ends through the same code path as the script would
            os.waitpid(pid, 0)
        if i == 4:
            for method in ("spawn", "forkserver"):
                with mp.get_context(method).Pool(2) as pool:
                    assert pool.map(square, range(4)) == [0, 1, 4, 9], method
    print("done", float(loss))
