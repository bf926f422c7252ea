"""An input-bound loop: each batch is augmented on the host in numpy (random crops, flips, noise)
before a small jitted step, with the loss read every step."""

import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
images = rng.random(size=(512, 40, 40, 3), dtype=np.float32)
labels = rng.integers(0, 10, 512)
w = jnp.zeros((32 * 32 * 3, 10))


def augment(batch):
    out = np.empty((len(batch), 32, 32, 3), np.float32)
    for i, img in enumerate(batch):
        top, left = rng.integers(0, 9, 2)
        crop = img[top : top + 32, left : left + 32]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out[i] = np.clip(crop + rng.normal(0, 0.05, crop.shape), 0, 1)
    return out


@jax.jit
def train_step(w, x, y):
    def loss_fn(w):
        logits = x.reshape(x.shape[0], -1) @ w
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

    loss, g = jax.value_and_grad(loss_fn)(w)
    return w - 0.01 * g, loss


for step in range(30):
    idx = rng.integers(0, 512, 128)
    x = augment(images[idx])
    w, loss = train_step(w, x, labels[idx])
    print(step, float(loss))
