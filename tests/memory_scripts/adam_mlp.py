"""An MLP trained with optax.adam (or SGD with momentum), its state donated: the memory at-peak tests' program.

    python tests/memory_scripts/adam_mlp.py --steps 4
"""

import argparse
import functools

import jax
import jax.numpy as jnp
import optax


def init_params(key, sizes):
    params = {}
    for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {"w": jax.random.normal(sub, (d_in, d_out)) * d_in**-0.5, "b": jnp.zeros(d_out)}
    return params


def loss_fn(params, x, y, remat, repeat=1):
    if repeat > 1:  # the batch `repeat` times over, made inside the step (--repeat: runs out of memory)
        x, y = jnp.tile(x, (repeat, 1)), jnp.tile(y, repeat)
    layer = jax.checkpoint(lambda h, p: jax.nn.gelu(h @ p["w"] + p["b"])) if remat else (lambda h, p: jax.nn.gelu(h @ p["w"] + p["b"]))
    names = sorted(params)
    for name in names[:-1]:
        x = layer(x, params[name])
    logits = x @ params[names[-1]]["w"] + params[names[-1]]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), axis=-1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--remat", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--optimizer", choices=("adam", "momentum"), default="adam")
    args = parser.parse_args()
    optimizer = optax.adam(1e-3) if args.optimizer == "adam" else optax.sgd(1e-2, momentum=0.9)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, args.remat, args.repeat)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = init_params(jax.random.PRNGKey(0), [128] + [args.width] * args.layers + [10])
    opt_state = optimizer.init(params)
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, 128))
    y = jax.random.randint(jax.random.PRNGKey(2), (args.batch,), 0, 10)
    for _ in range(args.steps):
        params, opt_state, loss = train_step(params, opt_state, x, y)
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
