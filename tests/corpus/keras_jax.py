"""Keras 3 on JAX: model.fit with gradient_accumulation_steps=2 in the optimizer and
steps_per_execution=2: 32 batches, 16 optimizer updates."""

import os

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from truth import Clock, write  # noqa: E402

ACCUM, UPDATES, BATCH = 2, 16, 128


class Ticks(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.clock = Clock()

    def on_train_batch_end(self, batch, logs=None):  # once per execution: 2 batches, one update
        self.clock.tick()


keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(512)])
model.compile(optimizer=keras.optimizers.Adam(1e-3, gradient_accumulation_steps=ACCUM), loss="mse", steps_per_execution=ACCUM)
x = np.random.default_rng(0).normal(size=(ACCUM * UPDATES * BATCH, 512)).astype("float32") * 0.01
ticks = Ticks()
model.fit(x, x, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[ticks])
state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True, optimizer_variables=True, metrics_variables=True)
call_flops = jax.jit(model.train_step).lower(state, (x[:BATCH], x[:BATCH])).compile().cost_analysis()["flops"]
write(iterations=ACCUM * UPDATES, updates=UPDATES, micro_batches=ACCUM, times=ticks.clock.times, flops=ACCUM * call_flops)
