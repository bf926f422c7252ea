"""A plain JAX training loop with a jitted eval function run once, halfway through. Batches are
slices of a dataset held in memory (no input pipeline to speak of: see numpy_augment.py for one)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

rng = np.random.default_rng(0)
params = {"w1": jnp.asarray(rng.normal(size=(32, 256)) * 0.1, jnp.float32), "w2": jnp.asarray(rng.normal(size=(256, 10)) * 0.1, jnp.float32)}
opt = optax.adam(1e-3)
opt_state = opt.init(params)


def logits_fn(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]


@jax.jit
def train_step(params, opt_state, x, y):
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def eval_step(params, x, y):
    logits = logits_fn(params, x)
    return jnp.mean(jnp.argmax(logits, -1) == y), optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


x_eval, y_eval = rng.normal(size=(512, 32)).astype(np.float32), rng.integers(0, 10, 512)
data_x, data_y = rng.normal(size=(40 * 128, 32)).astype(np.float32), rng.integers(0, 10, 40 * 128)
for step in range(40):
    x, y = data_x[step * 128 : (step + 1) * 128], data_y[step * 128 : (step + 1) * 128]
    params, opt_state, loss = train_step(params, opt_state, x, y)
    if step == 20:
        acc, eval_loss = eval_step(params, x_eval, y_eval)
        print(f"step {step}: loss {float(loss):.3f} eval acc {float(acc):.3f} eval loss {float(eval_loss):.3f}")
print("final loss", float(loss))
