"""Keras 3 on the torch backend: model.fit, 2 epochs of 10 batches. Keras updates with its own
optimizers (no torch.optim), after `loss.backward()`: 20 updates."""

import os

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from truth import Clock, write  # noqa: E402

EPOCHS, BATCHES, BATCH = 2, 10, 64
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription


class Ticks(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.clock = Clock()

    def on_train_batch_end(self, batch, logs=None):
        self.clock.tick()


keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x, y = rng.normal(size=(BATCHES * BATCH, 256)).astype("float32"), rng.integers(0, 10, BATCHES * BATCH)
ticks = Ticks()
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[ticks])
with FlopCounterMode(display=False) as mode:  # one update's forward and backward, as Keras's train_step runs them
    loss = model.compute_loss(x=None, y=torch.as_tensor(y[:BATCH]), y_pred=model(torch.as_tensor(x[:BATCH]), training=True))
    torch.autograd.grad(loss, [v.value for v in model.trainable_variables])  # not loss.backward(): that would be a 21st step
write(iterations=EPOCHS * BATCHES, updates=EPOCHS * BATCHES, micro_batches=1, times=ticks.clock.times, flops=int(mode.get_total_flops()))
