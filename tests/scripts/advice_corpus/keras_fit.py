"""Keras 3 on JAX: a small classifier trained with model.fit() and validation data, as the Keras
guides write it."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.normal(size=(3584, 32)).astype("float32")
y = (x[:, :10].argmax(-1)).astype("int32")
x_val, y_val = x[:512], y[:512]

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(x, y, batch_size=128, epochs=2, validation_data=(x_val, y_val), verbose=2)
