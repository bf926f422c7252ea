"""A recommender-style model with a large, narrow embedding table (8 floats per row), trained with adam.

On a TPU, a float32 array's last dimension is laid out in tiles of 128 lanes: a [rows, 8] table
takes 16 times its bytes in HBM, and so do adam's two moments of it. `--packed` stores the same
table as [rows / 16, 128] (16 rows per lane row) and picks each row's 8 lanes in the step.
docs/memory.md records both with `--topology v5e:2x2` and reads `aot.at_peak`.

    tpu-perf record --topology v5e:2x2 examples/jax_narrow_embedding.py
    tpu-perf record --topology v5e:2x2 examples/jax_narrow_embedding.py --packed
"""

import argparse
import functools

import jax
import jax.numpy as jnp
import optax

DIM = 8
LANES = 128
PACK = LANES // DIM


def embed(table, ids, packed):
    if not packed:
        return table[ids]
    lanes = table[ids // PACK].reshape(ids.shape[0], PACK, DIM)  # the lane row holding each id
    return jnp.take_along_axis(lanes, (ids % PACK)[:, None, None], axis=1)[:, 0]


def loss_fn(params, ids, target, packed):
    h = jax.nn.relu(embed(params["table"], ids, packed) @ params["w1"])
    return jnp.mean((h @ params["w2"] - target) ** 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=12_000_000)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--packed", action="store_true")
    args = parser.parse_args()
    optimizer = optax.adam(1e-3)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, ids, target):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, target, args.packed)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    shape = (args.rows // PACK, LANES) if args.packed else (args.rows, DIM)
    params = {"table": jax.random.normal(k1, shape) * 0.01, "w1": jax.random.normal(k2, (DIM, 256)) * DIM**-0.5, "w2": jax.random.normal(k3, (256, 1)) * 0.06}
    opt_state = optimizer.init(params)
    for step in range(args.steps):
        ids = jax.random.randint(jax.random.PRNGKey(step), (args.batch,), 0, args.rows)
        params, opt_state, loss = train_step(params, opt_state, ids, jnp.ones((args.batch, 1)))
    print(f"final loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
