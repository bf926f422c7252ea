"""JAX training fed by a torch DataLoader (a common mix: torch for data, JAX for the model), the
loss printed every step. The process imports both frameworks; the steps are JAX's."""

import jax
import jax.numpy as jnp
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,))), batch_size=64, shuffle=True)
w = jnp.zeros((256, 10))


@jax.jit
def train_step(w, x, y):
    def loss_fn(w):
        return -jnp.mean(jax.nn.log_softmax(x @ w)[jnp.arange(x.shape[0]), y])

    loss, g = jax.value_and_grad(loss_fn)(w)
    return w - 0.1 * g, loss


for step, (x, y) in enumerate(loader):
    w, loss = train_step(w, x.numpy(), y.numpy())
    print(step, float(loss))
