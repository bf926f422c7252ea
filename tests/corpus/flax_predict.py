"""Batch inference as flax users write it: a stateless `predict_step` under jax.jit, each batch's
predictions fetched with `np.asarray` (the loop's only sync): 30 batches. No call carries state
to the next, so tpu-perf takes the most-called function as the step, at the end of the run."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from truth import Clock, write

BATCHES, BATCH = 30, 256


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(512, 1024, rngs=rngs)
        self.out = nnx.Linear(1024, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))


graphdef, params = nnx.split(MLP(nnx.Rngs(0)))


@jax.jit
def predict_step(params, images):
    logits = nnx.merge(graphdef, params)(images)
    return jnp.argmax(logits, axis=-1)


rng = np.random.default_rng(0)
predictions = []
clock = Clock()
for _ in range(BATCHES):
    images = rng.random((BATCH, 512), dtype=np.float32)
    predictions.append(np.asarray(predict_step(params, images)))
    clock.tick()
print("predicted", sum(len(p) for p in predictions))
flops = predict_step.lower(params, images).compile().cost_analysis()["flops"]
write(iterations=BATCHES, updates=BATCHES, micro_batches=1, times=clock.times, flops=flops)
