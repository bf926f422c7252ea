"""flax linen: a GRU language model (`nn.RNN` over `nn.GRUCell`, a scan over time), a TrainState
with optax.adam, a jax.jit train step returning the new state and the loss: 16 updates on
synthetic tokens. XLA's cost analysis counts a scan's body once; the FLOPs are the script's hand
count of the matmuls (2 FLOPs per multiply-add, backward 2x forward)."""

import jax
import optax
from flax import linen as nn
from flax.training import train_state
from truth import Clock, write

VOCAB, EMBED, HIDDEN, SEQ, BATCH = 1000, 96, 128, 35, 20
UPDATES = 16


class GRULanguageModel(nn.Module):
    vocab_size: int
    embed_size: int
    hidden_size: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab_size, self.embed_size)(tokens)
        x = nn.RNN(nn.GRUCell(features=self.hidden_size))(x)
        return nn.Dense(self.vocab_size)(x)


@jax.jit
def train_step(state, tokens, targets):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


model = GRULanguageModel(VOCAB, EMBED, HIDDEN)
tokens = jax.random.randint(jax.random.PRNGKey(1), (BATCH * UPDATES, SEQ + 1), 0, VOCAB)
params = model.init(jax.random.PRNGKey(0), tokens[:BATCH, :SEQ])["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

clock = Clock()
for i in range(UPDATES):
    batch = tokens[i * BATCH:(i + 1) * BATCH]
    state, loss = train_step(state, batch[:, :-1], batch[:, 1:])
    if i % 4 == 0:
        print(f"update {i} loss {float(loss):.3f}")
    clock.tick()
gru = 3 * HIDDEN * (EMBED + HIDDEN)  # reset, update and candidate gates, each on the input and the state
write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=3 * 2 * BATCH * SEQ * (gru + HIDDEN * VOCAB))
