"""flax nnx: a 2-layer LSTM language model (`nnx.RNN` over `nnx.LSTMCell`, a scan), nnx.Optimizer
with SGD and an nnx.jit train step: 12 updates. XLA's cost analysis counts a scan's body once; the
FLOPs are the script's hand count of the matmuls (2 FLOPs per multiply-add, backward 2x forward)."""

import jax.numpy as jnp
import optax
from flax import nnx
from truth import Clock, write

VOCAB, EMBED, HIDDEN, SEQ, BATCH = 1000, 128, 128, 35, 20
UPDATES = 12


class LanguageModel(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(VOCAB, EMBED, rngs=rngs)
        self.lstm1 = nnx.RNN(nnx.LSTMCell(EMBED, HIDDEN, rngs=rngs))
        self.lstm2 = nnx.RNN(nnx.LSTMCell(HIDDEN, HIDDEN, rngs=rngs))
        self.decoder = nnx.Linear(HIDDEN, VOCAB, rngs=rngs)

    def __call__(self, tokens):
        return self.decoder(self.lstm2(self.lstm1(self.embed(tokens))))


model = LanguageModel(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, tokens, targets):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(tokens), targets).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


tokens = jnp.arange(BATCH * SEQ, dtype=jnp.int32).reshape(BATCH, SEQ) % VOCAB
clock = Clock()
for _ in range(UPDATES):
    loss = train_step(model, optimizer, tokens, jnp.roll(tokens, -1, axis=1))
    loss.block_until_ready()
    clock.tick()
lstm = 4 * HIDDEN * (EMBED + HIDDEN) + 4 * HIDDEN * (HIDDEN + HIDDEN)
write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=3 * 2 * BATCH * SEQ * (lstm + HIDDEN * VOCAB))
