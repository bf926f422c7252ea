"""One train loop per wrapper: KIND = pjit | method | nnx | eqx. Times its own steps (synchronised)
so the test can compare step times with what the script saw."""

import json
import sys
import time

import jax
import jax.numpy as jnp


def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


def run_pjit(steps):
    from jax.experimental.pjit import pjit

    step = pjit(lambda w, x: w - 0.1 * jax.grad(loss)(w, x))
    w, x = jnp.ones((64, 64)) * 0.01, jnp.ones((16, 64))
    return loop(steps, lambda w: step(w, x), w)


class Trainer:
    def __init__(self):
        self.x = jnp.ones((16, 64))
        self.step = jax.jit(self.update)  # jax.jit on a bound method

    def update(self, w):
        return w - 0.1 * jax.grad(loss)(w, self.x)


def run_method(steps):
    t = Trainer()
    return loop(steps, t.step, jnp.ones((64, 64)) * 0.01)


def run_nnx(steps):
    import optax
    from flax import nnx

    model = nnx.Sequential(nnx.Linear(64, 64, rngs=nnx.Rngs(0)), nnx.relu, nnx.Linear(64, 64, rngs=nnx.Rngs(1)))
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x = jnp.ones((16, 64))

    @nnx.jit
    def train_step(model, opt, x):
        loss_value, g = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
        opt.update(model, g)
        return loss_value

    return loop(steps, lambda _: train_step(model, opt, x), None)


def run_eqx(steps):
    import equinox as eqx
    import optax

    model = eqx.nn.MLP(64, 64, 64, 2, key=jax.random.PRNGKey(0))
    tx = optax.adam(1e-3)
    state = tx.init(eqx.filter(model, eqx.is_array))
    x = jnp.ones((16, 64))

    @eqx.filter_jit
    def train_step(model, state, x):
        loss_value, g = eqx.filter_value_and_grad(lambda m: jnp.mean(jax.vmap(m)(x) ** 2))(model)
        updates, state = tx.update(g, state, model)
        return eqx.apply_updates(model, updates), state, loss_value

    carry = (model, state)

    def one(carry):
        model, state, _ = train_step(carry[0], carry[1], x)
        return model, state

    return loop(steps, one, carry)


def loop(steps, step, carry):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        carry = step(carry)
        jax.block_until_ready(carry)
        times.append(time.perf_counter() - t0)
    return times


if __name__ == "__main__":
    kind, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    times = {"pjit": run_pjit, "method": run_method, "nnx": run_nnx, "eqx": run_eqx}[kind](steps)
    json.dump({"iterations": steps, "step_times_s": times}, open(out, "w"))
