"""flax's MNIST example in nnx, as its tutorial trains: a small CNN, nnx.Optimizer(adamw),
nnx.MultiMetric (Accuracy, Average loss) updated inside the jitted train and eval steps, and at
each epoch's end `metrics.compute()`, a test pass with `eval_step`, and a log line with
`accuracy * 100`: 3 epochs of 8 updates on synthetic 28x28 images. MNIST_BLOCK_EACH_EPOCH=1 adds
one `jax.block_until_ready` of the model at each epoch's end."""

import os
from functools import partial

import jax
import numpy as np
import optax
from flax import nnx
from truth import Clock, write

EPOCHS, STEPS_PER_EPOCH, BATCH, TEST_BATCHES = 3, 8, 32, 2


class CNN(nnx.Module):
    """A simple CNN model."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(7 * 7 * 32, 128, rngs=rngs)
        self.linear2 = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        x = self.avg_pool(nnx.relu(self.conv1(x)))
        x = self.avg_pool(nnx.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)  # flatten
        x = nnx.relu(self.linear1(x))
        return self.linear2(x)


def loss_fn(model: CNN, batch):
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch["label"]).mean()
    return loss, logits


@nnx.jit
def train_step(model: CNN, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    """Train for a single step."""
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.
    optimizer.update(model, grads)  # In-place updates.


@nnx.jit
def eval_step(model: CNN, metrics: nnx.MultiMetric, batch):
    loss, logits = loss_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.


def batches(rng, n):
    for _ in range(n):
        yield {"image": rng.random((BATCH, 28, 28, 1), dtype=np.float32), "label": rng.integers(0, 10, BATCH).astype(np.int32)}


model = CNN(rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(0.005, 0.9), wrt=nnx.Param)
metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
metrics_history = {"train_loss": [], "train_accuracy": [], "test_loss": [], "test_accuracy": []}
rng = np.random.default_rng(0)
test_ds = list(batches(rng, TEST_BATCHES))

clock = Clock()
for epoch in range(1, EPOCHS + 1):
    model.train()  # Switch to training mode.
    for batch in batches(rng, STEPS_PER_EPOCH):
        train_step(model, optimizer, metrics, batch)
        clock.tick()
    if os.environ.get("MNIST_BLOCK_EACH_EPOCH"):  # one extra sync per epoch (the headline must not flip on it)
        jax.block_until_ready(nnx.state(model))
    for metric, value in metrics.compute().items():  # Compute the metrics.
        metrics_history[f"train_{metric}"].append(value)  # Record the metrics.
    metrics.reset()  # Reset the metrics for the test set.

    model.eval()  # Switch to evaluation mode.
    for test_batch in test_ds:
        eval_step(model, metrics, test_batch)
    for metric, value in metrics.compute().items():
        metrics_history[f"test_{metric}"].append(value)
    metrics.reset()  # Reset the metrics for the next training epoch.
    print(f"[train] epoch: {epoch}, loss: {metrics_history['train_loss'][-1]}, accuracy: {metrics_history['train_accuracy'][-1] * 100}")
    print(f"[test] epoch: {epoch}, loss: {metrics_history['test_loss'][-1]}, accuracy: {metrics_history['test_accuracy'][-1] * 100}")

updates = EPOCHS * STEPS_PER_EPOCH
flops = train_step.lower(model, optimizer, metrics, test_ds[0]).compile().cost_analysis()["flops"]
write(iterations=updates, updates=updates, micro_batches=1, times=clock.times, flops=flops)
