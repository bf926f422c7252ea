"""A small JAX MLP trained with plain SGD on synthetic data. No tpu-perf marks: record it as it is.

    python examples/jax_mlp.py --steps 50
    tpu-perf record examples/jax_mlp.py --steps 50
"""

import argparse

import jax
import jax.numpy as jnp


def init_params(key, sizes):
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=False):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (d_in, d_out)) * (2.0 / d_in) ** 0.5, jnp.zeros(d_out)))
    return params


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1))


@jax.jit
def train_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    key = jax.random.PRNGKey(0)
    params = init_params(key, [512, args.width, args.width, 10])
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, 512))
    y = jax.random.randint(jax.random.PRNGKey(2), (args.batch,), 0, 10)
    for step in range(args.steps):
        params, loss = train_step(params, x, y, args.lr)
        if step % 20 == 0:
            print(f"step {step} loss {float(loss):.4f}")
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
