"""A small transformer block trained on a 2x2 Mesh with named axes ("data", "model"): batch split on
"data", the MLP and attention weights split on "model", a bare PartitionSpec constraint inside the
step resolved against `with mesh:`. Describes its step like dp_mlp.py does."""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESH = ((2, 2), ("data", "model"))
BATCH, SEQ, D, HEADS, FF, VOCAB = 8, 64, 128, 4, 512, 256


def jit_kwargs(mesh):
    return {}


def make_mesh(devices):
    """A plain Mesh (auto axes) over `devices`, in their order."""
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(devices).reshape(MESH[0]), MESH[1])


def inputs():
    f32 = jnp.float32
    params = {
        "embed": ((VOCAB, D), f32, P(None, "model")),
        "wqkv": ((D, 3 * D), f32, P(None, "model")),
        "wo": ((D, D), f32, P("model", None)),
        "w_in": ((D, FF), f32, P(None, "model")),
        "w_out": ((FF, D), f32, P("model", None)),
    }
    return (params, ((BATCH, SEQ), jnp.int32, P("data", None)))


def forward(p, tokens):
    x = p["embed"][tokens]
    x = jax.lax.with_sharding_constraint(x, P("data", None, None))
    q, k, v = jnp.split(x @ p["wqkv"], 3, axis=-1)
    heads = lambda t: t.reshape(BATCH, SEQ, HEADS, D // HEADS).transpose(0, 2, 1, 3)  # noqa: E731
    att = jax.nn.softmax(heads(q) @ heads(k).transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5, axis=-1)
    o = (att @ heads(v)).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D)
    x = x + o @ p["wo"]
    x = x + jax.nn.relu(x @ p["w_in"]) @ p["w_out"]
    logits = x @ p["embed"].T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], axis=-1))


def step(params, tokens):
    loss, grads = jax.value_and_grad(forward)(params, tokens)
    return jax.tree.map(lambda w, g: w - 1e-2 * g, params, grads), loss


def main(steps: int) -> None:
    from jax.sharding import NamedSharding

    mesh = make_mesh(jax.devices())
    params_spec, tokens_spec = inputs()
    key = jax.random.key(1)
    params = {k: jax.device_put(jax.random.normal(key, s, d) * 0.02, NamedSharding(mesh, ps)) for k, (s, d, ps) in params_spec.items()}
    tokens = jax.device_put(jax.random.randint(key, tokens_spec[0], 0, VOCAB), NamedSharding(mesh, tokens_spec[2]))
    train = jax.jit(step, **jit_kwargs(mesh))
    with mesh:
        for _ in range(steps):
            params, loss = train(params, tokens)
    print("loss", float(loss))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
