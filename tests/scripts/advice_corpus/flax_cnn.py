"""A flax CNN on 32x32 RGB images (3 input channels), batch 16, conv channels 32 and 64, trained with
optax: the shapes of a first image-classification script, its images held in memory."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(64, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


model = CNN()
rng = np.random.default_rng(0)
params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)))
tx = optax.adam(1e-3)
opt_state = tx.init(params)


@jax.jit
def train_step(params, opt_state, images, labels):
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, images), labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


data_images, data_labels = rng.normal(size=(30 * 16, 32, 32, 3)).astype(np.float32), rng.integers(0, 10, 30 * 16)
for i in range(30):
    images, labels = data_images[i * 16 : (i + 1) * 16], data_labels[i * 16 : (i + 1) * 16]
    params, opt_state, loss = train_step(params, opt_state, images, labels)
print("loss", float(loss))
